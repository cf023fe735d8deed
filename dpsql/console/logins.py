"""Who is logged in to the console. A login is kept on the server (the cookie carries only its
random id, signed), so logging out ends it at once; each login has its own dpsql Session, as
each wire connection does, closed when the login ends."""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field

from ..config import UserPolicy
from ..session import Session

LIFETIME = 8 * 3600.0  # seconds a login lasts at most
IDLE = 3600.0  # seconds without a request that end it


@dataclass
class Login:
    sid: str
    user: UserPolicy
    session: Session
    created: float
    seen: float
    # The Session is used by one request at a time: its settings, then EXPLAIN or the run.
    lock: threading.Lock = field(default_factory=threading.Lock)
    names: dict[str, list[str] | None] = field(default_factory=dict)  # described columns per SQL text

    @property
    def officer(self) -> bool:
        return self.user.officer


class TooManyLogins(Exception):
    pass


class Logins:
    """The live logins, at most `limit` at once; expired ones are handed back to be closed."""

    def __init__(self, limit: int, lifetime: float = LIFETIME, idle: float = IDLE):
        self.limit, self.lifetime, self.idle = limit, lifetime, idle
        self._logins: dict[str, Login] = {}
        self._lock = threading.Lock()

    def add(self, user: UserPolicy, session: Session) -> Login:
        now = time.monotonic()
        with self._lock:
            if len(self._logins) >= self.limit:
                raise TooManyLogins()
            login = Login(secrets.token_urlsafe(32), user, session, now, now)
            self._logins[login.sid] = login
            return login

    def get(self, sid: str | None) -> Login | None:
        """The live login with this id (and it is seen now), or None."""
        if not sid:
            return None
        now = time.monotonic()
        with self._lock:
            login = self._logins.get(sid)
            if login is None or self._expired(login, now):
                return None
            login.seen = now
            return login

    def remove(self, sid: str | None) -> Login | None:
        with self._lock:
            return self._logins.pop(sid, None) if sid else None

    def expired(self) -> list[Login]:
        """Remove and return the logins past their lifetime or idle time."""
        now = time.monotonic()
        with self._lock:
            gone = [login for login in self._logins.values() if self._expired(login, now)]
            for login in gone:
                del self._logins[login.sid]
            return gone

    def drain(self) -> list[Login]:
        """Remove and return every login (shutdown)."""
        with self._lock:
            gone = list(self._logins.values())
            self._logins.clear()
            return gone

    def _expired(self, login: Login, now: float) -> bool:
        return now - login.created > self.lifetime or now - login.seen > self.idle


def close(login: Login) -> None:
    """End a login's Session (the server's engine and ledger, which it shares, stay open)."""
    login.session.close()
