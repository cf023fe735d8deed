"""Verification of a ledger: the HMAC chain walked record by record, each analyst's head,
and totals recomputed from the charges. A mixin of `Ledger`."""

from __future__ import annotations

import json
from fractions import Fraction

from ..accounting.cost import Cost, parse_fraction
from .budgets import LIFETIME
from .integrity import charge_record, grant_record, head_tag, tag
from .jobs import GLOBAL
from .store import Store


class Verification(Store):
    """`verify`: every problem found in the ledger's records."""

    def verify(self) -> list[str]:
        """Every problem found: a record edited, deleted, inserted or reordered (its chain or an
        analyst's head does not match), or totals that disagree with the charges."""
        key, con, problems = self.identity.key, self._con(), []
        walked: dict[tuple[str, str], tuple[int, str]] = {}
        for cid, user, segment, at, sql, cost, detail, chain in self._exec(
            con, "SELECT id, user_name, segment, at, sql, cost, detail, chain FROM charges ORDER BY id"
        ).fetchall():
            count, last = walked.get((user, "charge"), (0, ""))
            expected = tag(key, last, charge_record(cid, user, segment, at, sql, cost, detail))
            if chain != expected:
                problems.append(f"charge {cid} of {user}: edited, or a charge before it was removed")
            walked[(user, "charge")] = (count + 1, chain or expected)
        for user, seq, eps, dlt, at, chain in self._exec(
            con, "SELECT user_name, seq, epsilon, delta, at, chain FROM grants ORDER BY user_name, seq"
        ).fetchall():
            count, last = walked.get((user, "grant"), (0, ""))
            if chain != tag(key, last, grant_record(user, seq, eps, dlt, at)):
                problems.append(f"grant {seq} of {user}: edited, or a grant before it was removed")
            walked[(user, "grant")] = (count + 1, chain or "")
        heads = {
            (u, k): (c, last, t)
            for u, k, c, last, t in self._exec(con, "SELECT user_name, kind, count, last, tag FROM heads").fetchall()
        }
        for (user, kind), (count, last, t) in heads.items():
            if t != head_tag(key, user, kind, count, last):
                problems.append(f"the {kind} head of {user} was edited")
            elif walked.get((user, kind)) != (count, last):
                problems.append(
                    f"{kind}s of {user}: {walked.get((user, kind), (0, ''))[0]} found, {count} recorded "
                    "(records removed or added)"
                )
        for user, kind in set(walked) - set(heads):
            problems.append(f"{kind}s of {user} without a head (records added, or the head removed)")
        spent: dict[tuple[str, int], list] = {}
        for user, segment, cost in self._exec(con, "SELECT user_name, segment, cost FROM charges").fetchall():
            c = Cost.from_json(cost)
            acc = spent.setdefault((user, segment), [0, Fraction(0), Fraction(0)])
            acc[0] += 1
            acc[1] += c.epsilon
            acc[2] += c.delta
        lifetime: dict[str, list] = {}
        for (user, _), (n, eps, dlt) in spent.items():
            acc = lifetime.setdefault(user, [0, Fraction(0), Fraction(0)])
            acc[0], acc[1], acc[2] = acc[0] + n, acc[1] + eps, acc[2] + dlt
        for user, segment, sums, queries in self._exec(
            con, "SELECT user_name, segment, sums, queries FROM totals"
        ).fetchall():
            if user == GLOBAL:
                continue
            totals = {k: parse_fraction(v) for k, v in json.loads(sums).items()}
            if segment == LIFETIME:  # a lifetime cap counts every charge of its user
                got = lifetime.get(user, [0, Fraction(0), Fraction(0)])
            else:
                got = spent.pop((user, segment), [0, Fraction(0), Fraction(0)])
            if [queries, totals.get("epsilon", Fraction(0)), totals.get("delta", Fraction(0))] != got:
                problems.append(f"the totals of {user} (segment {segment}) disagree with the charges")
        for user, segment in spent:
            problems.append(f"charges of {user} (segment {segment}) without totals")
        return problems
