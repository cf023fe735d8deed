"""Login throttling, without I/O (the caller passes `now`): which attempts are let in, and how
long a refusal is held before it is answered. Shared by wire and console logins.

Many analysts share one address (a BI server, a notebook host, a NAT), so nothing one client
does from an address may lock the others out. The throttle therefore never delays a correct
password of a user who is not locked; what it slows and limits is failures:

- per user name: failures in a row (each within `lockout_seconds` of the last) lock that name
  for `lockout_seconds`, even against the right password: the accepted price of bounding the
  guesses at one account, from anywhere;
- per address: a budget of `address_budget` failures that refills at `lockout_after` per
  `lockout_seconds`. Once it is spent, an attempt from there is refused whatever its password,
  unless it is the right password of a user who logged in from there within `trust_seconds`.
  This bounds password spraying (one password, many names) from one address;
- every refusal is held before it is answered, `base_delay` doubling with the user's and the
  address's recent failures up to `max_delay`; a success is answered at once.

A client learns that a guess was wrong as soon as no prompt success came, so the hold is not
what bounds guessing; the two budgets above are, and they are charged when the exchange ends,
whether or not the client waits for the answer. Unknown user names are throttled exactly like
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
    trusted: dict[str, float] = field(default_factory=dict)  # user -> last login from here, oldest first


@dataclass
class LoginThrottle:
    base_delay: float = 0.25  # seconds a first refusal is held, doubling with recent failures
    max_delay: float = 8.0
    lockout_after: int = 10  # failures of one name in a row before it is locked
    lockout_seconds: float = 300.0
    address_budget: int = 0  # failures an address may spend at once; 0: twice lockout_after
    trust_seconds: float = 7 * 86400.0  # a user's login from an address exempts it from that address's budget
    trusted_per_address: int = 1024  # names remembered per address (the oldest go first)
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
        in, or the refusal to answer. A wrong password counts against the user and, while the
        address has budget left, spends one failure of it; a refused right one counts nowhere."""
        with self._lock:
            self._sweep(now)
            u, a = self._user(user, now), self._address(address, now)
            locked = self._locked(user, u, now)  # by an attempt that ended while this one ran
            if locked is not None:
                return locked
            hold = self._delay(max(u.failures, math.ceil(a.spent)) + 1)  # alike for right and wrong
            exhausted = a.spent + 1 > self.address_budget
            if correct and (not exhausted or now - a.trusted.get(user, -math.inf) < self.trust_seconds):
                self._succeeded(user, u, a, now)
                return ADMITTED
            if not correct:
                self._failed(u, now)
            if exhausted:
                return self._address_refusal(a, hold, correct)
            a.spent += 1
            return Verdict(False, hold, "28P01", f'password authentication failed for user "{user}"',
                           audit="login failed")

    def _locked(self, user: str, u: _User, now: float) -> Verdict | None:
        if u.locked_until <= now:
            return None
        return Verdict(False, 0.0, "28000", f'too many failed logins for user "{user}"; try again in '
                       f"{math.ceil(u.locked_until - now)} s",
                       f"{self.lockout_after} failed logins in a row lock a user name for "
                       f"{self.lockout_seconds:g} s, against password guessing; ask an administrator if "
                       "they were not yours", audit="login locked out")

    def _address_refusal(self, a: _Address, hold: float, correct: bool) -> Verdict:
        wait = math.ceil((a.spent + 1 - self.address_budget) / self._rate())
        return Verdict(False, hold, "28000", f"too many failed logins from this address; try again in {wait} s",
                       f"users who logged in from this address in the last {self.trust_seconds / 86400:g} days "
                       "are still let in; the others wait until its failures age out",
                       audit="login refused" if correct else "login failed")

    def _failed(self, u: _User, now: float) -> None:
        u.failures += 1
        u.last_failure = now
        if u.failures >= self.lockout_after:
            u.locked_until = now + self.lockout_seconds
            u.failures = 0

    def _succeeded(self, user: str, u: _User, a: _Address, now: float) -> None:
        u.failures = 0
        a.trusted.pop(user, None)
        a.trusted[user] = now
        if len(a.trusted) > self.trusted_per_address:
            a.trusted.pop(next(iter(a.trusted)))

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
        self._users = {k: u for k, u in self._users.items()
                       if u.locked_until > now or now - u.last_failure < self.lockout_seconds}
        for a in self._addresses.values():
            self._refill_to(a, now)
            a.trusted = {k: t for k, t in a.trusted.items() if now - t < self.trust_seconds}
        self._addresses = {k: a for k, a in self._addresses.items() if a.spent > 0 or a.trusted}
        self._sweep_at = max(4096, 2 * (len(self._users) + len(self._addresses)))

    def _delay(self, failures: int) -> float:
        return min(self.max_delay, self.base_delay * 2 ** (failures - 1))
