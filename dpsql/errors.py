"""One error hierarchy for every front end.

The classes are PEP 249's, so DB-API users catch what they expect; each instance carries a
PostgreSQL SQLSTATE so the wire server can send it unchanged. Messages are written for the
analyst: they say what to do next, and never contain values read from private rows.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class Warning(Exception):  # noqa: A001 - PEP 249 requires this name
    """PEP 249 warning."""


class Error(Exception):
    """Base of every dpsql error; `sqlstate` is a PostgreSQL SQLSTATE code."""

    sqlstate = "XX000"

    def __init__(self, message: str, *, sqlstate: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if sqlstate is not None:
            self.sqlstate = sqlstate

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\nHINT: {self.hint}"
        return self.message


class InterfaceError(Error):
    sqlstate = "08000"


class DatabaseError(Error):
    sqlstate = "XX000"


class DataError(DatabaseError):
    sqlstate = "22000"


class OperationalError(DatabaseError):
    sqlstate = "58000"


class IntegrityError(DatabaseError):
    sqlstate = "23000"


class InternalError(DatabaseError):
    sqlstate = "XX000"


class ProgrammingError(DatabaseError):
    sqlstate = "42000"


class NotSupportedError(DatabaseError):
    sqlstate = "0A000"


class UnsupportedQuery(ProgrammingError, NotSupportedError):
    """A construct dpsql refuses (0A000): an error in the query as far as the analyst is
    concerned (ProgrammingError), and a missing feature as PEP 249 sees it (NotSupportedError)."""

    sqlstate = "0A000"


class PolicyError(Error):
    """A mistake in the policy file, reported with file, table, column and the fix."""

    sqlstate = "F0000"  # config_file_error


class BudgetExceeded(OperationalError):
    """The analyst's privacy filter would HALT: the query is refused and nothing is charged."""

    sqlstate = "53000"  # insufficient_resources


def syntax_error(message: str, hint: str | None = None) -> ProgrammingError:
    return ProgrammingError(message, sqlstate="42601", hint=hint)


def forbidden(message: str, hint: str | None = None) -> ProgrammingError:
    """Something that would reveal private rows or escape the sandbox (42501)."""
    return ProgrammingError(message, sqlstate="42501", hint=hint)


def unsupported(message: str, hint: str | None = None) -> UnsupportedQuery:
    return UnsupportedQuery(message, hint=hint)


BUDGET_RELATION = "dpsql_budget"  # SELECT ... FROM dpsql_budget: SHOW dpsql.budget as a relation, free


def undefined_table(name: str, tables: Iterable[str] = ()) -> ProgrammingError:
    """`tables`: the tables a query may name (the policy's, so public), for a hint."""
    if name.lower() == BUDGET_RELATION:  # the session answers it read on its own, never inside another query
        return unsupported(
            f"{BUDGET_RELATION} can only be read on its own, not joined, nested or in a WITH clause",
            hint=f"SELECT * FROM {BUDGET_RELATION} (filtering and ordering it is fine), then use its "
            "values in your next query",
        )
    declared = sorted(set(tables))
    listed = f": {_listing(declared)}" if declared else ""
    return ProgrammingError(
        f'relation "{name}" does not exist',
        sqlstate="42P01",
        hint=f"{_nearest(name, declared)}only tables declared in the policy file can be queried{listed}",
    )


def undefined_column(name: str, where: str | None = None, columns: Iterable[str] = ()) -> ProgrammingError:
    """`columns`: the names the query could have meant (schema, so public), for a hint."""
    suffix = f" in {where}" if where else ""
    names = sorted({c for c in columns if not c.startswith("__dpsql")})
    hint = f"{_nearest(name.rsplit('.', 1)[-1], names)}the columns here: {_listing(names)}" if names else None
    return ProgrammingError(f'column "{name}" does not exist{suffix}', sqlstate="42703", hint=hint)


def _nearest(name: str, names: list[str]) -> str:
    """'perhaps you meant "x"; ' for the closest of `names` to a misspelt `name`, else ''."""
    close = difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.6)
    return f'perhaps you meant "{close[0]}"; ' if close else ""


def _listing(names: list[str], most: int = 20) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def invalid_parameter(message: str, hint: str | None = None) -> ProgrammingError:
    return ProgrammingError(message, sqlstate="22023", hint=hint)
