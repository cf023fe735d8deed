"""Login throttling, without I/O (the caller passes `now`): which attempts are let in, and how
long a refusal is held before it is answered. Shared by wire and console logins.

Many analysts share one address (a BI server, a notebook host, a NAT), so nothing one client
does from an address may lock the others out. The throttle therefore never delays a correct
password of a user who is not locked; what it slows and limits is failures:

- per user name: failures in a row (each within `lockout_seconds` of the last) lock that name
  for `lockout_seconds`, even against the right password: the accepted price of bounding the
  guesses at one account, from anywhere;
- per address: a budget of `address_budget` failures that refills at `lockout_after` per
  `lockout_seconds`. Once it is spent, every further failure from there is held the longest
  (`max_delay`) and answered "too many failed logins from this address": the tarpit that makes
  spraying one password over many names from one address slow for a client that waits;
- every refusal is held before it is answered, `base_delay` doubling with the user's and the
  address's recent failures up to `max_delay`; a success is answered at once, whatever the
  address's failures: a right password of a user who is not locked is never refused or held.

A client that does not wait learns that a guess was wrong as soon as no prompt success came;
what bounds its guessing is the per-name lockout (guesses at one account) and the caps on
connections logging in (each held refusal keeps its connection until answered).
Unknown user names are throttled exactly like
known ones, and a refusal reads and waits the same for a right and a wrong password, so the
throttle says nothing about which names exist or whom it trusts."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Verdict:
    """What to do with one login attempt: let it in, or answer with a FATAL ErrorResponse
    (`sqlstate`, `message`, `hint`) once `hold` seconds have passed; `audit` names the ledger
    event a refusal records."""

    ok: bool
    hold: float = 0.0
    sqlstate: str = ""
    message: str = ""
    hint: str | None = None
    audit: str = ""


ADMITTED = Verdict(True)


@dataclass
class _User:
    failures: int = 0  # in a row, each within lockout_seconds of the one before
    last_failure: float = -math.inf
    locked_until: float = -math.inf


@dataclass
class _Address:
    spent: float = 0.0  # failures not yet refilled, as of `stamp`
    stamp: float = 0.0


@dataclass
class LoginThrottle:
    base_delay: float = 0.25  # seconds a first refusal is held, doubling with recent failures
    max_delay: float = 8.0
    lockout_after: int = 10  # failures of one name in a row before it is locked
    lockout_seconds: float = 300.0
    address_budget: int = 0  # failures an address may spend at once; 0: twice lockout_after
    _users: dict[str, _User] = field(default_factory=dict)
    _addresses: dict[str, _Address] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _sweep_at: int = 4096  # states kept before the next sweep, whenever it comes
    _swept: float = -math.inf

    def __post_init__(self) -> None:
        # One user's failures alone (lockout_after per lockout_seconds, the refill rate) never
        # spend the whole budget: one misconfigured client cannot lock its address out.
        self.address_budget = self.address_budget or 2 * self.lockout_after

    def admit(self, user: str, now: float) -> Verdict:
        """Before the exchange: a locked user name is refused at once (known or not alike);
        anything else goes on to the password, never waiting here."""
        with self._lock:
            u = self._users.get(user)  # a name never failed leaves no state behind
            return (self._locked(user, u, now) if u is not None else None) or ADMITTED

    def outcome(self, user: str, address: str, correct: bool, now: float) -> Verdict:
        """After the exchange (`correct`: the password was right for an existing user): let it
        in, or the refusal to answer. A right password is let in unless the name is locked,
        whatever else came from the address; a wrong one counts against the name and spends one
        failure of the address's budget, and is held the longer the more both have failed."""
        with self._lock:
            self._sweep(now)
            u, a = self._user(user, now), self._address(address, now)
            locked = self._locked(user, u, now)  # by an attempt that ended while this one ran
            if locked is not None:
                return locked
            if correct:
                u.failures = 0
                return ADMITTED
            hold = self._delay(max(u.failures, math.ceil(a.spent)) + 1)
            self._failed(u, now)
            if a.spent + 1 > self.address_budget:
                return self._address_refusal(a)
            a.spent += 1
            return Verdict(
                False, hold, "28P01", f'password authentication failed for user "{user}"', audit="login failed"
            )

    def _locked(self, user: str, u: _User, now: float) -> Verdict | None:
        if u.locked_until <= now:
            return None
        return Verdict(
            False,
            0.0,
            "28000",
            f'too many failed logins for user "{user}"; try again in {math.ceil(u.locked_until - now)} s',
            f"{self.lockout_after} failed logins in a row lock a user name for "
            f"{self.lockout_seconds:g} s, against password guessing; ask an administrator if "
            "they were not yours",
            audit="login locked out",
        )

    def _address_refusal(self, a: _Address) -> Verdict:
        wait = math.ceil((a.spent + 1 - self.address_budget) / self._rate())
        return Verdict(
            False,
            self.max_delay,
            "28000",
            f"too many failed logins from this address; try again in {wait} s",
            "right passwords are still let in at once; failures from here are held until the "
            "address's failures age out",
            audit="login failed",
        )

    def _failed(self, u: _User, now: float) -> None:
        u.failures += 1
        u.last_failure = now
        if u.failures >= self.lockout_after:
            u.locked_until = now + self.lockout_seconds
            u.failures = 0

    def _user(self, user: str, now: float) -> _User:
        u = self._users.setdefault(user, _User())
        if now - u.last_failure >= self.lockout_seconds:
            u.failures = 0
        return u

    def _address(self, address: str, now: float) -> _Address:
        """The address's state, its spent budget refilled up to `now`."""
        a = self._addresses.setdefault(address, _Address(stamp=now))
        self._refill_to(a, now)
        return a

    def _refill_to(self, a: _Address, now: float) -> None:
        a.spent = max(0.0, a.spent - (now - a.stamp) * self._rate())
        a.stamp = now

    def _rate(self) -> float:
        return self.lockout_after / self.lockout_seconds  # failures per second

    def _sweep(self, now: float) -> None:
        """Forget what no longer matters, once there is much of it or once every lockout period:
        unknown names cost an attacker nothing to send, so memory must not grow with them."""
        if len(self._users) + len(self._addresses) < self._sweep_at and now - self._swept < self.lockout_seconds:
            return
        self._swept = now
        self._users = {
            k: u for k, u in self._users.items() if u.locked_until > now or now - u.last_failure < self.lockout_seconds
        }
        for a in self._addresses.values():
            self._refill_to(a, now)
        self._addresses = {k: a for k, a in self._addresses.items() if a.spent > 0}
        self._sweep_at = max(4096, 2 * (len(self._users) + len(self._addresses)))

    def _delay(self, failures: int) -> float:
        return min(self.max_delay, self.base_delay * 2 ** (failures - 1))
