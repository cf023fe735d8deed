"""Soak and fault run: clients, hostile queries, SIGKILLed servers and a shared ledger.

    python -m benchmarks.soak [--clients 8] [--minutes 2] [--kill-every 15] [--servers 2] [--workers 1]

Two `dpsql serve` processes share one SQLite ledger (lock contention) on the sample hospital.
N psycopg clients, split between them, loop until the time is up: DP queries (cache off, so
each is charged), hostile statements (a 2 MB expression, an IN list of 100,000, a SELECT *,
broken SQL) and SHOW dpsql.budget. A killer SIGKILLs a random server at random intervals and
restarts it on its port; clients reconnect. With --workers N each server is `dpsql serve
--workers N`, whose supervisor writes its workers' charges: the killer then SIGKILLs either a
whole server (the supervisor, with charges of its workers in flight) or one worker (which the
supervisor restarts). Every DP query carries a unique marker in a
comment, so after the run each answer a client received is looked up among the ledger's
recorded charges: an answer without a durable charge is a violation (there must be none).
Reports answers, refusals, charges, violations, `ledger verify`, and each server's memory
(RSS) growth over its longest life. Everything binds to 127.0.0.1 and stops by itself.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg

from .serving import add_logins, dsn_of, free_port, launch, sample_policy, wait_until_up

QUERIES = [
    "SELECT sex, COUNT(*), AVG(age) FROM patients GROUP BY sex",
    "SELECT diagnosis, COUNT(*) FROM visits WHERE cost > 500 GROUP BY diagnosis",
    "SELECT COUNT(*), SUM(income) FROM patients WHERE age > 40",
    "SELECT ward, AVG(length_of_stay) FROM visits GROUP BY ward",
]
HOSTILE = [
    "SELECT COUNT(*) FROM patients WHERE age < " + "+".join(["1"] * 1_000_000),
    "SELECT COUNT(*) FROM patients WHERE age IN (" + ",".join(map(str, range(100_000))) + ")",
    "SELECT * FROM patients",
    "SELECT COUNT(* FROM patients",
    "SELECT SUM(patient_id) FROM patients",
    "COPY patients TO '/tmp/x'",
    "SELECT pg_sleep(10)",
]


class Server:
    """One `dpsql serve` on a fixed port, restartable, with its memory sampled."""

    def __init__(self, policy: Path, ledger: Path, workers: int = 1):
        self.policy, self.ledger, self.port, self.workers = policy, ledger, free_port(), workers
        self.proc: subprocess.Popen | None = None
        self.lives: list[list[int]] = []  # RSS samples (kB) of each life

    def start(self) -> None:
        self.proc = launch(self.policy, self.ledger, self.port, "--host", "127.0.0.1", "--workers", str(self.workers))
        self.lives.append([])
        wait_until_up(self.dsn("alice"), pause=0.1)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def kill_worker(self, rng: random.Random) -> bool:
        """SIGKILL one of the supervisor's workers (it restarts it); False if none was found."""
        try:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except (OSError, AttributeError):
            return False
        if not children:
            return False
        try:
            os.kill(int(rng.choice(children)), signal.SIGKILL)
        except ProcessLookupError:
            return False
        return True

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def sample(self) -> None:
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
            self.lives[-1].append(
                int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))
            )
        except (OSError, StopIteration, AttributeError):
            pass

    def dsn(self, user: str) -> str:
        return dsn_of(self.port, user)


def client(
    server: Server, user: str, stop: float, seed: int, answered: list[str], counts: dict[str, int], lock: threading.Lock
) -> None:
    rng = random.Random(seed)
    conn = None
    while time.monotonic() < stop:
        try:
            if conn is None or conn.closed:
                conn = psycopg.connect(server.dsn(user), autocommit=True, connect_timeout=5)
                conn.execute("SET dpsql.cache = off")
            roll = rng.random()
            if roll < 0.2:
                sql, kind = rng.choice(HOSTILE), "hostile"
            elif roll < 0.3:
                sql, kind = "SHOW dpsql.budget", "show"
            else:
                marker = uuid.uuid4().hex
                sql, kind = f"{rng.choice(QUERIES)} /* soak {marker} */", "dp"
            try:
                conn.execute(sql).fetchall()
                with lock:
                    counts[f"{kind} answered"] = counts.get(f"{kind} answered", 0) + 1
                    if kind == "dp":
                        answered.append(marker)
            except psycopg.errors.Error as e:
                if conn.closed or isinstance(e, psycopg.OperationalError) and e.sqlstate is None:
                    raise
                with lock:
                    counts[f"{kind} refused"] = counts.get(f"{kind} refused", 0) + 1
        except (psycopg.OperationalError, psycopg.InterfaceError):
            with lock:
                counts["connection lost"] = counts.get("connection lost", 0) + 1
            conn = None
            time.sleep(0.2)
    if conn is not None:
        conn.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--kill-every", type=float, default=15.0, help="mean seconds between SIGKILLs")
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--workers", type=int, default=1, help="dpsql serve --workers of each server")
    args = ap.parse_args()
    from dpsql.ledger import Ledger, failure_of

    with tempfile.TemporaryDirectory() as d:
        policy = sample_policy(Path(d))
        ledger = Path(d) / "ledger.sqlite"
        for user in ("alice", "bob"):
            add_logins(policy, ledger, user)
        servers = [Server(policy, ledger, args.workers) for _ in range(args.servers)]
        for s in servers:
            s.start()
        stop = time.monotonic() + args.minutes * 60
        answered: list[str] = []
        counts: dict[str, int] = {}
        lock = threading.Lock()
        threads = [
            threading.Thread(
                target=client,
                args=(servers[i % len(servers)], ("alice", "bob")[i % 2], stop, i, answered, counts, lock),
            )
            for i in range(args.clients)
        ]
        for t in threads:
            t.start()
        rng, kills, worker_kills = random.Random(7), 0, 0
        next_kill = time.monotonic() + rng.expovariate(1 / args.kill_every)
        while time.monotonic() < stop:
            time.sleep(1)
            for s in servers:
                s.sample()
            if time.monotonic() >= next_kill:
                victim = rng.choice(servers)
                if args.workers > 1 and rng.random() < 0.5 and victim.kill_worker(rng):
                    worker_kills += 1
                else:
                    victim.kill()
                    victim.start()
                kills += 1
                next_kill = time.monotonic() + rng.expovariate(1 / args.kill_every)
            print(
                f"\r{int(stop - time.monotonic()):>4} s left, {len(answered)} answers, {kills} kills",
                end="",
                file=sys.stderr,
                flush=True,
            )
        for t in threads:
            t.join(60)
        for s in servers:
            s.stop()
        print(file=sys.stderr)
        led = Ledger(ledger)
        charged = {
            row["sql"].rsplit("soak ", 1)[-1].split(" ")[0]
            for user in ("alice", "bob")
            for row in led.history(user)
            if "/* soak " in row["sql"]
        }
        rows = [row for user in ("alice", "bob") for row in led.history(user) if "/* soak " in row["sql"]]
        released = {
            row["sql"].rsplit("soak ", 1)[-1].split(" ")[0]
            for row in rows
            if row["released"] is not None and failure_of(row["released"]) is None
        }
        failed = sum(1 for row in rows if failure_of(row["released"]) is not None)
        violations = [m for m in answered if m not in charged]
        problems = led.verify()
        growth = [life[-1] - life[0] for s in servers for life in s.lives if len(life) > 1]
        longest = max((life for s in servers for life in s.lives), key=len)
        workers = f" of {args.workers} workers each" if args.workers > 1 else ""
        print(
            f"| {args.clients} clients, {args.servers} servers{workers} on one SQLite ledger, {args.minutes:g} min, "
            f"{kills} SIGKILLs ({worker_kills} of a single worker) | |"
        )
        print("|---|---|")
        for key in sorted(counts):
            print(f"| {key} | {counts[key]} |")
        print(
            f"| DP charges recorded | {len(charged)} (with a recorded release: {len(released)}; recorded as failed "
            f"after the charge: {failed}) |"
        )
        print(f"| answers without a durable charge | {len(violations)} |")
        print(f"| ledger verify | {'ok' if not problems else '; '.join(problems[:3])} |")
        if longest:
            print(
                f"| server RSS over its longest life ({len(longest)} s) | {longest[0] / 1024:.0f} -> "
                f"{longest[-1] / 1024:.0f} MB (largest growth of any life: {max(growth, default=0) / 1024:.0f} MB) |"
            )
        if violations or problems:
            sys.exit(1)


if __name__ == "__main__":
    main()
