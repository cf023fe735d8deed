"""The `dpsql` command line: one module per command group, each adding its commands to `main`
(group.py); common.py holds what they share."""

from __future__ import annotations

from . import budget, ledger_admin, policy, query, serve, synopsis, users
from .common import render_table, text_grid
from .group import main
from .policy import report_lines

__all__ = [
    "budget",
    "ledger_admin",
    "main",
    "policy",
    "query",
    "render_table",
    "report_lines",
    "serve",
    "synopsis",
    "text_grid",
    "users",
]
