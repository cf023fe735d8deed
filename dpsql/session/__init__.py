"""One analyst's session: the pipeline every front end shares (pipeline.py), and the modules
that do each of its steps' work. Front ends import from here."""

from .budget import admits_more, budget_summary
from .explain import explain_lines
from .pipeline import Session
from .randomized import LocalRelease
from .released import public_names
from .result import Result
from .setting_table import DP_SETTINGS
from .settings import default_settings

__all__ = [
    "DP_SETTINGS",
    "LocalRelease",
    "Result",
    "Session",
    "admits_more",
    "budget_summary",
    "default_settings",
    "explain_lines",
    "public_names",
]
