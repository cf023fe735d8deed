"""Budgets in the ledger: grants and segments, windows and lifetime caps, running totals, and
the atomic check-and-charge that returns the Charge receipt. A mixin of `Ledger`."""

from __future__ import annotations

import functools
import json
import time
import types
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

from ..accounting.cost import Cost, fraction_text, parse_fraction
from ..accounting.filters import Filter, Totals, make_filter
from ..config import BudgetPolicy, past_ceiling
from ..errors import BudgetExceeded, OperationalError
from .current import Current, keep
from .group_commit import Pending
from .integrity import charge_record, grant_record
from .jobs import GLOBAL, ChargeJob
from .refusals import refusal
from .store import Store

WINDOW_EPOCH = 1577836800  # 2020-01-01 00:00 UTC: windows are counted from here, in the ledger's clock
WINDOW_STRIDE = 1000  # segment = window * WINDOW_STRIDE + the window's grant segment
LIFETIME = -1  # the segment of a windowed budget's lifetime cap: every charge, never refreshed


class _SumsTexts:
    """Totals rows' sums by their text (read-only mappings). A charge reads back the text the
    previous charge wrote, so the writer files each text it writes with the sums it came from:
    parsing the fractions again was a fifth of a charge's own work. Bounded: emptied when full."""

    def __init__(self, size: int = 4096):
        self._size, self._known = size, dict[str, Mapping[str, Fraction]]()

    def parsed(self, text: str) -> Mapping[str, Fraction]:
        hit = self._known.get(text)
        if hit is None:
            hit = self.file(text, {k: parse_fraction(v) for k, v in json.loads(text).items()})
        return hit

    def text(self, sums: Mapping[str, Fraction]) -> str:
        text = json.dumps({k: fraction_text(v) for k, v in sums.items()})
        self.file(text, sums)
        return text

    def file(self, text: str, sums: Mapping[str, Fraction]) -> Mapping[str, Fraction]:
        if len(self._known) >= self._size:
            self._known = {}
        view = self._known[text] = types.MappingProxyType(dict(sums))
        return view


_SUMS = _SumsTexts()


@functools.lru_cache(maxsize=1024)
def _parsed_grants(rows: tuple[tuple[str, str], ...]) -> tuple[tuple[Fraction, Fraction], ...]:
    return tuple((parse_fraction(e), parse_fraction(d)) for e, d in rows)


@functools.lru_cache(maxsize=1024)
def _segment_filter(budget: BudgetPolicy, grants: tuple[tuple[Fraction, Fraction], ...]) -> tuple[int, Filter]:
    """`segment_filter` once per budget and grants (filters are immutable): each charge asks."""
    return segment_filter(budget, grants)


def segment_filter(budget: BudgetPolicy, grants: Sequence[tuple[Fraction, Fraction]]) -> tuple[int, Filter]:
    """The filter in force for a budget after its grants.

    Under basic composition a grant simply adds to the totals. Any other filter's guarantee
    needs its budget fixed in advance, so a grant opens a new *segment*: a fresh filter over
    the granted amount, composed with the earlier segments by basic composition (what was left
    of the earlier segment is not carried over)."""
    if budget.filter == "basic":
        return 0, make_filter(
            "basic", budget.epsilon + sum(g[0] for g in grants), budget.delta + sum(g[1] for g in grants)
        )
    if not grants:
        return 0, make_filter(
            budget.filter, budget.epsilon, budget.delta, reserve=budget.delta_reserve, rdp_order=budget.rdp_order
        )
    eps, delta = grants[-1]
    reserve = budget.delta_reserve * delta / budget.delta if budget.delta else Fraction(0)
    return len(grants), make_filter(budget.filter, eps, delta, reserve=reserve, rdp_order=budget.rdp_order)


def window_of(budget: BudgetPolicy, now: float) -> tuple[int, float, float] | None:
    """A windowed budget's current window at `now`: its number, start and end (epoch seconds)."""
    if budget.window is None:
        return None
    index = (int(now) - WINDOW_EPOCH) // budget.window
    start = WINDOW_EPOCH + index * budget.window
    return index, float(start), float(start + budget.window)


def lifetime_filter(budget: BudgetPolicy) -> Filter | None:
    """A windowed budget's lifetime cap: a filter of the same kind over every charge ever."""
    if budget.lifetime_epsilon is None:
        return None
    reserve = (
        budget.delta_reserve * budget.lifetime_delta / budget.delta
        if budget.delta and budget.delta_reserve
        else Fraction(0)
    )
    return make_filter(
        budget.filter, budget.lifetime_epsilon, budget.lifetime_delta, reserve=reserve, rdp_order=budget.rdp_order
    )


@dataclass(frozen=True)
class Charge:
    """The receipt of a charge the filters admitted, written in its transaction, and required
    by the release guard (dpsql/guarantee/guard.py) before any noisy value is drawn; nothing drawn leaves
    before that transaction is durable (PendingCharge.durable)."""

    id: int
    totals: Totals
    filter: Filter
    cost: Cost


class PendingCharge:
    """A charge whose transaction is under way (Ledger.charging)."""

    def __init__(self, pending: Pending, errors: tuple[type[BaseException], ...]):
        self._pending, self._errors = pending, errors

    def admitted(self) -> Charge:
        """The charge, once the filters have admitted it and it is written (not yet on disk)."""
        return self._told(self._pending.ran)

    def durable(self) -> Charge:
        """The charge, once its COMMIT is on disk."""
        return self._told(self._pending.committed)

    def _told(self, wait: Callable[[], Charge]) -> Charge:
        try:
            return wait()
        except BudgetExceeded:
            raise
        except self._errors as e:
            raise OperationalError(
                f"the ledger could not record the charge: {e}",
                hint="nothing was charged and nothing was released; try again",
            ) from None


class Budgets(Store):
    """Reads of a budget's state, the charge, and grants."""

    def _grants(self, con, user: str, since: float | None = None) -> tuple[tuple[Fraction, Fraction], ...]:
        """The user's grants (in a windowed budget: those of the current window, from `since`)."""
        rows = self._exec(
            con,
            "SELECT epsilon, delta FROM grants WHERE user_name = ? AND at >= ? ORDER BY seq",
            (user, since if since is not None else float("-inf")),
        ).fetchall()
        return _parsed_grants(tuple((e, d) for e, d in rows))

    def now(self, con=None) -> float:
        """The ledger's own clock (epoch seconds): windows are computed from it, so proxies
        sharing a ledger agree on them whatever their own clocks say."""
        return time.time()

    def _segment(self, con, who: str, budget: BudgetPolicy, now: float) -> tuple[int, Filter, float | None]:
        """The segment and filter in force for `who` at `now` (the window's, after its grants),
        and when that window ends (None: the budget does not refresh)."""
        window = window_of(budget, now)
        segment, f = _segment_filter(budget, self._grants(con, who, window[1] if window else None))
        if window is None:
            return segment, f, None
        return window[0] * WINDOW_STRIDE + segment, f, window[2]

    def _totals(self, con, user: str, segment: int) -> Totals:
        row = self._exec(
            con, "SELECT sums, queries FROM totals WHERE user_name = ? AND segment = ?", (user, segment)
        ).fetchone()
        if row is None:
            return Totals()
        return Totals(_SUMS.parsed(row[0]), row[1])

    def _put_totals(self, con, user: str, segment: int, totals: Totals) -> None:
        sums = _SUMS.text(totals.sums)
        self._exec(
            con,
            "INSERT INTO totals (user_name, segment, sums, queries) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (user_name, segment) DO UPDATE SET sums = excluded.sums, queries = excluded.queries",
            (user, segment, sums, totals.queries),
        )

    def state(self, user: str, budget: BudgetPolicy) -> tuple[Filter, Totals]:
        """The analyst's current filter and its totals (in a windowed budget: this window's)."""
        con = self._con()
        segment, f, _ = self._segment(con, user, budget, self.now(con))
        totals = self._totals(con, user, segment)
        return f, totals

    def lifetime(self, user: str, budget: BudgetPolicy) -> tuple[Filter, Totals] | None:
        """A windowed budget's lifetime cap and what every window together has spent of it."""
        f = lifetime_filter(budget)
        return None if f is None else (f, self._totals(self._con(), user, LIFETIME))

    def spent(self, user: str, budget: BudgetPolicy) -> Totals:
        return self.state(user, budget)[1]

    def charge(
        self,
        user: str,
        budget: BudgetPolicy,
        cost: Cost,
        sql: str,
        detail: dict[str, Any],
        global_budget: BudgetPolicy | None = None,
    ) -> Charge:
        """Check every applicable filter and record the charge in one transaction; refuse
        (charging nothing) when a filter would HALT. Returns once the charge is durable."""
        return self.charging(user, budget, cost, sql, detail, global_budget).durable()

    def charging(
        self,
        user: str,
        budget: BudgetPolicy,
        cost: Cost,
        sql: str,
        detail: dict[str, Any] | str,
        global_budget: BudgetPolicy | None = None,
        failed: Callable[[], None] | None = None,
        others: Sequence[tuple[str, BudgetPolicy]] = (),
    ) -> PendingCharge:
        """`charge`, with its transaction on the ledger's writer thread: the caller learns at
        `admitted()` whether the filters admit it (a refusal raises there) and may run the query
        while the COMMIT reaches the disk; `durable()` must return before anything derived from
        the data leaves. `failed()` runs on the writer thread as soon as the charge is refused or
        cannot be recorded, before `admitted()` or `durable()` tell: a query that started before
        its admission is stopped by it. `detail` may be given as its JSON text already (a plan's
        is the same for every execution). `others`: analysts charged the same cost in the same
        transaction (each with a charge record of their own): admitted together or not at all."""
        text = detail if isinstance(detail, str) else json.dumps(detail, default=str)
        job = ChargeJob(user, budget, cost, sql, text, global_budget, tuple(others))
        return PendingCharge(self._submit(job, failed), self._errors)

    def _charge_in(self, con, job: ChargeJob) -> Charge:
        """A charge job, applied in the writer's open transaction: every filter of the analyst
        (and of the job's other analysts, and the global budget) is checked before anything is
        written; then one charge record per analyst. Returns the first analyst's receipt."""
        user, cost = job.user, job.cost
        payers = [(user, job.budget)] + [(u, b) for u, b in job.others if u != user]
        checks = payers + ([(GLOBAL, job.global_budget)] if job.global_budget is not None else [])
        now = self.now(con)  # inside the transaction: every proxy sees one window
        current = self._current(con)  # what this writer wrote last, if nobody else has written since
        results = []
        for who, b in checks:
            segment, f, refreshes = self._segment_now(con, current, who, b, now)
            filters = [(segment, f, refreshes)]
            life = lifetime_filter(b)
            if life is not None:
                filters.append((LIFETIME, life, None))
            for seg, flt, refresh in filters:
                totals = self._totals_now(con, current, who, seg)
                after = totals.plus(flt.usage(cost))
                if not flt.admits(after):
                    raise refusal(who, user, flt, totals, cost, refresh, lifetime=seg == LIFETIME)
                results.append((who, seg, flt, after))
        at, cost_text = time.time(), cost.to_json()
        receipts: dict[str, int] = {}
        try:
            for who, _ in payers:
                segment = next(seg for w, seg, _, _ in results if w == who)
                record = (who, segment, at, job.sql, cost_text, job.detail)
                receipts.setdefault(who, self._insert_charge(con, current, record))
            for who, segment, _, after in results:
                self._put_totals(con, who, segment, after)
                if current is not None:
                    keep(current.totals, (who, segment), after)
        except BaseException:  # rolled back (to this job's savepoint): so is what the cache was told
            self._forget()
            raise
        return Charge(receipts[user], results[0][3], results[0][2], cost)

    def _insert_charge(self, con, current: Current | None, record: tuple[str, int, float, str, str, str]) -> int:
        """A charge record with its chained tag; its id. When this writer wrote the last charge
        and nobody has written since, the id AUTOINCREMENT would give is the next one, and the
        record is written with its tag at once; otherwise the id is the database's, tagged after."""
        who, segment, at, sql, cost_text, detail = record
        if current is not None and current.last_id is not None:
            charge_id = current.last_id + 1
            chain = self._append(con, who, "charge", charge_record(charge_id, *record), current)
            self._exec(
                con,
                "INSERT INTO charges (id, user_name, segment, at, sql, cost, detail, chain) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (charge_id, *record, chain),
            )
        else:
            cur = self._exec(
                con,
                "INSERT INTO charges (user_name, segment, at, sql, cost, detail) "
                "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                record,
            )
            charge_id = cur.fetchone()[0]
            chain = self._append(con, who, "charge", charge_record(charge_id, *record), current)
            self._exec(con, "UPDATE charges SET chain = ? WHERE id = ?", (chain, charge_id))
        if current is not None:
            current.last_id = charge_id
        return charge_id

    def _segment_now(
        self, con, current: Current | None, who: str, budget: BudgetPolicy, now: float
    ) -> tuple[int, Filter, float | None]:
        """`_segment`, from what this writer read last when nobody has written since (a grant
        is a write) and the window is the same."""
        if current is None:
            return self._segment(con, who, budget, now)
        window = window_of(budget, now)
        start = window[1] if window else None
        hit = current.segments.get(who)
        if hit is not None and hit[1] == start and (hit[0] is budget or hit[0] == budget):
            segment, f = hit[2], hit[3]
        else:
            segment, f, _ = self._segment(con, who, budget, now)
            keep(current.segments, who, (budget, start, segment, f))
        return segment, f, window[2] if window else None

    def _totals_now(self, con, current: Current | None, who: str, segment: int) -> Totals:
        """`_totals`, as this writer wrote them last when nobody has written since."""
        hit = current.totals.get((who, segment)) if current is not None else None
        if hit is None:
            hit = self._totals(con, who, segment)
            if current is not None:
                keep(current.totals, (who, segment), hit)
        return hit

    def grant(
        self,
        user: str,
        epsilon: Fraction,
        delta: Fraction,
        budget: BudgetPolicy | None = None,
        event: tuple[str, str, str] | None = None,
    ) -> None:
        """More budget for `user` (in a windowed budget: for the current window only); `event`
        (kind, address, detail: who granted it and why) is written in the same transaction, so
        a grant never stands without its reason."""
        with self._write([user]) as con:
            window = window_of(budget, self.now(con)) if budget is not None else None
            if window and len(self._grants(con, user, window[1])) >= WINDOW_STRIDE - 1:
                raise OperationalError(
                    f"{user} has {WINDOW_STRIDE - 1} grants in this window already",
                    sqlstate="54000",
                    hint="grant a larger amount at once",
                )
            if budget is not None:
                since = window[1] if window else None
                granted = sum((e for e, _ in self._grants(con, user, since)), Fraction(0))
                _accountable(budget, budget.epsilon + granted + epsilon)
            seq = len(self._grants(con, user)) + 1
            eps, dlt, at = fraction_text(epsilon), fraction_text(delta), time.time()
            chain = self._append(con, user, "grant", grant_record(user, seq, eps, dlt, at))
            self._exec(
                con,
                "INSERT INTO grants (user_name, seq, epsilon, delta, at, chain) VALUES (?, ?, ?, ?, ?, ?)",
                (user, seq, eps, dlt, at, chain),
            )
            if event is not None:  # at the grant's own time: the audit log pairs them by it
                self._exec(
                    con,
                    "INSERT INTO events (at, kind, user_name, address, detail) VALUES (?, ?, ?, ?, ?)",
                    (at, event[0], user, event[1], event[2]),
                )
            self._forget()  # a head and a grant written around this connection's cache


def _accountable(budget: BudgetPolicy, epsilon: Fraction) -> None:
    """Refuse a grant that takes a budget past what its filter's accounting can compute with
    (`config.LARGEST_EPSILON`): it would fail every later answer with an internal error."""
    largest = past_ceiling(budget.filter, epsilon)
    if largest is not None:
        raise OperationalError(
            f"this grant would make the budget epsilon {float(epsilon):g}, past the {budget.filter} filter's {largest}",
            sqlstate="22023",
            hint="grant less, or move the analyst to the zcdp or basic filter, which take any epsilon",
        )
