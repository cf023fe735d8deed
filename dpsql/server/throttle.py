"""Login throttling, without I/O: exponential backoff per user name and per client address
after failed logins, then a temporary lockout. Unknown users are throttled exactly like known
ones, so the throttle says nothing about which names exist."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class _State:
    failures: int = 0
    next_allowed: float = 0.0
    locked_until: float = 0.0


@dataclass
class LoginThrottle:
    base_delay: float = 0.25  # seconds after the first failure, doubling with each further one
    max_delay: float = 8.0
    lockout_after: int = 10  # failures in a row before a lockout
    lockout_seconds: float = 300.0
    _states: dict[tuple[str, str], _State] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _keys(self, user: str, address: str) -> list[tuple[str, str]]:
        return [("user", user), ("address", address)]

    def admit(self, user: str, address: str, now: float) -> float | None:
        """Seconds to wait before this attempt may proceed, or None if it is locked out. Each
        admitted attempt moves the next slot on, so parallel attempts queue up behind the backoff."""
        with self._lock:
            states = [self._states.setdefault(k, _State()) for k in self._keys(user, address)]
            if any(s.locked_until > now for s in states):
                return None
            wait = max(0.0, max(s.next_allowed for s in states) - now)
            for s in states:
                if s.failures:
                    s.next_allowed = max(s.next_allowed, now) + self._delay(s.failures)
            return wait

    def failed(self, user: str, address: str, now: float) -> None:
        with self._lock:
            for k in self._keys(user, address):
                s = self._states.setdefault(k, _State())
                s.failures += 1
                s.next_allowed = max(s.next_allowed, now + self._delay(s.failures))
                if s.failures >= self.lockout_after:
                    s.locked_until = now + self.lockout_seconds
                    s.failures = 0

    def succeeded(self, user: str, address: str) -> None:
        with self._lock:
            for k in self._keys(user, address):
                self._states.pop(k, None)

    def _delay(self, failures: int) -> float:
        return min(self.max_delay, self.base_delay * 2 ** (failures - 1))
