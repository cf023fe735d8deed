"""Analysts' credentials in the ledger (SCRAM verifiers; the server never stores a
password). A mixin of `Ledger`."""

from __future__ import annotations

import time

from .store import Store


class Logins(Store):
    """Users, their verifiers and roles."""

    def set_user(self, user: str, verifier: str, role: str) -> None:
        with self._write([]) as con:
            self._exec(
                con,
                "INSERT INTO users (user_name, verifier, role, created) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (user_name) DO UPDATE SET verifier = excluded.verifier, role = excluded.role",
                (user, verifier, role, time.time()),
            )

    def remove_user(self, user: str) -> bool:
        with self._write([]) as con:
            cur = self._exec(con, "DELETE FROM users WHERE user_name = ?", (user,))
            return cur.rowcount > 0

    def user_credentials(self, user: str) -> tuple[str, str] | None:
        con = self._con()
        row = self._exec(con, "SELECT verifier, role FROM users WHERE user_name = ?", (user,)).fetchone()
        return None if row is None else (row[0], row[1])

    def list_users(self) -> list[tuple[str, str, float]]:
        con = self._con()
        return [
            tuple(r)
            for r in self._exec(con, "SELECT user_name, role, created FROM users ORDER BY user_name").fetchall()
        ]
