"""Writing a randomized-response release to Parquet or CSV, and registering it in the policy
as public tables (the rows, and the debiased estimates beside them)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import duckdb

from . import owner_only
from .duck_rows import insert_rows
from .errors import OperationalError, ProgrammingError

FORMATS = {".parquet": "PARQUET", ".csv": "CSV"}


def check_target(path: Path) -> None:
    """Refuse an output the release could not be written to, before anything is charged."""
    if path.suffix.lower() not in FORMATS:
        raise ProgrammingError(
            f"{path.name}: write the release to a .parquet or .csv file",
            sqlstate="22023",
            hint="for example --out patients_rr.parquet; nothing was charged",
        )
    if not path.parent.is_dir() or not os.access(path.parent, os.W_OK):
        raise ProgrammingError(
            f"{path.parent} is not a writable directory",
            sqlstate="58030",
            hint="create it, or choose another --out; nothing was charged",
        )


def write_table(path: Path, names: Sequence[str], types: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """The rows as a Parquet or CSV file (by the path's suffix), through an in-memory DuckDB; the
    file is its owner's only (0600), like the ledger that records the release: sharing it is a choice."""
    check_target(path)
    fmt = FORMATS[path.suffix.lower()]
    con = duckdb.connect(":memory:")
    try:
        cols = ", ".join(f"{_quote(n)} {t}" for n, t in zip(names, types))
        con.execute(f"CREATE TABLE release ({cols})")
        insert_rows(con, "release", rows, len(names))
        with owner_only.output(path) as written:
            target = str(written).replace("'", "''")
            con.execute(f"COPY release TO '{target}' (FORMAT {fmt}{', HEADER' if fmt == 'CSV' else ''})")
    except (duckdb.Error, OSError) as e:
        raise OperationalError(
            f"could not write {path}: {type(e).__name__}",
            sqlstate="58030",
            hint="the release stays charged; check the disk and write it again from Python",
        ) from None
    finally:
        con.close()


def estimates_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}_estimates{path.suffix}")


def check_register(policy_path: Path, names: Sequence[str]) -> None:
    """Refuse names the policy already has, before anything is charged."""
    text = policy_path.read_text()
    for name in names:
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise ProgrammingError(
                f"{name!r} is not a plain table name",
                sqlstate="42602",
                hint="use lower-case letters, digits and underscores; nothing was charged",
            )
        if re.search(rf"^\[tables\.{re.escape(name)}\]", text, re.M):
            raise ProgrammingError(
                f"the policy already has a table {name}",
                sqlstate="42P07",
                hint="choose another --register name; nothing was charged",
            )


def register(policy_path: Path, tables: Mapping[str, Path]) -> None:
    """Append [tables.NAME] public = true, source = "..." for each released file."""
    check_register(policy_path, list(tables))
    text = policy_path.read_text()
    blocks = "".join(
        f'\n[tables.{name}]  # a randomized-response release: public\npublic = true\nsource = "{p}"\n'
        for name, p in tables.items()
    )
    policy_path.write_text(text.rstrip("\n") + "\n" + blocks)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
