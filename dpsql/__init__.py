"""dpsql: a differentially private SQL proxy.

`dpsql.connect(policy, user=...)` opens an embedded PEP 249 connection; `dpsql serve` speaks
the PostgreSQL wire protocol. Every answer is noised, and its cost charged first.
"""

from .dbapi import (
    BINARY,
    DATETIME,
    NUMBER,
    ROWID,
    STRING,
    Binary,
    Connection,
    Cursor,
    Date,
    DateFromTicks,
    Time,
    TimeFromTicks,
    Timestamp,
    TimestampFromTicks,
    apilevel,
    connect,
    paramstyle,
    threadsafety,
)
from .errors import (
    BudgetExceeded,
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    PolicyError,
    ProgrammingError,
    Warning,
)

__version__ = "0.1.0"

__all__ = [
    "connect",
    "Connection",
    "Cursor",
    "apilevel",
    "threadsafety",
    "paramstyle",
    "Warning",
    "Error",
    "InterfaceError",
    "DatabaseError",
    "DataError",
    "OperationalError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "NotSupportedError",
    "PolicyError",
    "BudgetExceeded",
    "Date",
    "Time",
    "Timestamp",
    "DateFromTicks",
    "TimeFromTicks",
    "TimestampFromTicks",
    "Binary",
    "STRING",
    "BINARY",
    "NUMBER",
    "DATETIME",
    "ROWID",
]
