"""The policy file (TOML): what may be queried, with which bounds, by whom, on what budget.

The policy is public information (DESIGN §1): everything here may shape answers and error
messages. Loading it is pure validation; checks that need the data's schema (does the column
exist?) take the schema as an argument, so nothing here touches the database.

One module per job: model.py (the values), reader.py (reading them), load.py and tables.py
(parsing and validating the file), schema_check.py (against the engine's schema). This package
exports what the rest of dpsql uses.
"""

from __future__ import annotations

from .load import RESERVE_SHARE, WINDOW_KEYS, default_reserve, load_policy, parse_policy
from .model import (
    ENGINES,
    FILE_TYPES,
    FILTERS,
    LARGEST_EPSILON,
    MECHANISMS,
    ROW_UNIT,
    SOURCE_FORMATS,
    BudgetPolicy,
    ColumnPolicy,
    EngineConfig,
    Policy,
    PrivacyPolicy,
    TablePolicy,
    UserPolicy,
    past_ceiling,
)
from .reader import exact
from .schema_check import (
    INTEGER_TYPES,
    NUMERIC_TYPES,
    SchemaMismatch,
    check_against_schema,
    is_numeric_type,
    schema_problems,
)
from .tables import MAX_KEYS

__all__ = [
    "BudgetPolicy",
    "ColumnPolicy",
    "ENGINES",
    "EngineConfig",
    "FILE_TYPES",
    "FILTERS",
    "INTEGER_TYPES",
    "LARGEST_EPSILON",
    "MAX_KEYS",
    "MECHANISMS",
    "NUMERIC_TYPES",
    "Policy",
    "PrivacyPolicy",
    "RESERVE_SHARE",
    "ROW_UNIT",
    "SOURCE_FORMATS",
    "SchemaMismatch",
    "TablePolicy",
    "UserPolicy",
    "WINDOW_KEYS",
    "check_against_schema",
    "default_reserve",
    "exact",
    "is_numeric_type",
    "load_policy",
    "parse_policy",
    "past_ceiling",
    "schema_problems",
]
