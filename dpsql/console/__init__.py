"""The privacy console: a web front end served beside the wire protocol (`dpsql serve --http`).

Analysts see their own budget over time, their history, an EXPLAIN playground and a charged
run; privacy officers (officer = true in the policy) see every budget, grant with a reason,
search and export the audit log, read the policy and the ledger's verification. It shows only
what the wire would: released noisy values, costs and policy."""

from .app import create_app
from .service import ConsoleService

__all__ = ["ConsoleService", "create_app"]
