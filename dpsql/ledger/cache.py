"""The answer cache in the ledger: released answers kept per analyst, repeated free while
their receipt stands. A mixin of `Ledger`."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from .store import Store


class AnswerCache(Store):
    """Cached answers by key, and by the receipt they carry."""

    def cached_answers(self, user: str, receipts: set[int]) -> dict[int, Any]:
        """The user's cached answers that carry one of these receipts (charge ids), by receipt:
        the released answer's column names and intervals, which the charge record does not keep."""
        found: dict[int, Any] = {}
        for (text,) in self._exec(self._con(), "SELECT answer FROM cache WHERE user_name = ?", (user,)).fetchall():
            answer = json.loads(text)
            receipt = (answer.get("dp") or {}).get("receipt")
            if receipt in receipts:
                found[receipt] = answer
        return found

    def cache_get(self, user: str, key: str) -> Any | None:
        con = self._con()
        row = self._exec(con, "SELECT answer FROM cache WHERE user_name = ? AND key = ?", (user, key)).fetchone()
        return None if row is None else json.loads(row[0])

    def cache_put(self, user: str, key: str, answer: Any) -> None:
        """Best effort and not fsync'd: an answer that cannot be cached (or whose entry a power
        failure loses) is still an answer, whose release is recorded."""
        sql = (
            "INSERT INTO cache (user_name, key, answer, at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (user_name, key) DO UPDATE SET answer = excluded.answer, at = excluded.at"
        )
        params = (user, key, json.dumps(answer, default=str), time.time())
        with contextlib.suppress(*self._errors):
            self._write_lazily(sql, params)
