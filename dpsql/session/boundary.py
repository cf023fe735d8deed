"""What may leave a session: dpsql's own errors only."""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

from ..errors import Error, InternalError, ProgrammingError

log = logging.getLogger("dpsql")


@contextlib.contextmanager
def no_internals(what: str) -> Iterator[None]:
    """Only dpsql's own errors leave a session: a tree too deep for a recursive pass becomes a
    54001 refusal, and a bug an InternalError whose text carries no traceback and no value (the
    operator's log has the traceback, without row data)."""
    try:
        yield
    except Error:
        raise
    except RecursionError:  # a shape the limits let through that a recursive pass cannot walk
        raise ProgrammingError(
            "the statement nests too deeply to plan",
            sqlstate="54001",
            hint="simplify the statement, or lower max_expression_depth in the policy's "
            "[limits] section; nothing was released",
        ) from None
    except Exception as e:
        log.exception("internal error while answering %s", what)
        raise InternalError(
            f"internal error while answering {what}; nothing was released",
            hint=f"please report it ({type(e).__name__})",
        ) from e
