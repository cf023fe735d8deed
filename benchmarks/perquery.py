"""CPU time of one `dpsql serve` process per statement, and where it goes (cProfile, every thread).

    python -m benchmarks.perquery [--statements 2000] [--clients 1,8] [--profile FILE] [--top 40]
                                  [--code DIR] [--filter KIND] [--workers N]

Serves the sample hospital (a copy of its policy with a large budget, fresh ledger) in a child
process, drives it with psycopg clients (`SET dpsql.cache = off`, `SET dpsql.reuse = off`: every
execution planned from the plan cache, charged, run by the engine, noised and recorded), and
reads the child's CPU time (user + system, /proc) over `--statements` executions of each query
after a warm-up: the server's CPU per statement, whatever thread spent it, and that split by
thread (/proc's per-thread times, named by the child: the event loop, the statement threads,
the ledger writer, DuckDB's own threads). With --profile, the child runs every thread under cProfile, timed by each
thread's CPU clock (much slower; the split, not the totals, is what to read), and writes the
merged statistics to FILE on exit, the top functions by cumulative and by own time printed.
--code DIR serves dpsql from another checkout (a baseline's `git archive`), so that a
before/after pair runs on one machine state. --filter KIND composes the analysts' queries with
another filter than the sample's basic one, over a budget of epsilon 1e5 (each answer tells
the budget left, which every other filter finds by search). --workers N serves it as `dpsql
serve --workers N` does (the default on a machine of N cores: a supervisor whose thread writes
every worker's ledger jobs, and N worker processes, DuckDB's threads shared among them): the CPU
per statement of all its processes, split into the supervisor's and the workers' (no split by
thread, and no --profile).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# label: (query, share of --statements run: an auto-bounded SUM takes many times a COUNT's CPU)
QUERIES = {
    "grouped COUNT": ("SELECT sex, COUNT(*) FROM patients GROUP BY sex", 1.0),
    "grouped SUM (auto bounds)": ("SELECT ward, SUM(cost) FROM visits GROUP BY ward", 0.1),
}
SETUP = ("SET dpsql.cache = off", "SET dpsql.reuse = off")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (all its threads)."""
    return _cpu_of(Path(f"/proc/{pid}/stat"))


def _cpu_of(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def family_seconds(pid: int) -> dict[str, float]:
    """User + system CPU so far of a `dpsql serve --workers` supervisor and of its workers together."""
    workers = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    spent = {"supervisor (ledger writer)": cpu_seconds(pid), "workers": 0.0}
    for child_pid in workers:
        with contextlib.suppress(OSError):  # a worker that ended meanwhile
            spent["workers"] += cpu_seconds(int(child_pid))
    return spent


def thread_seconds(pid: int) -> dict[int, float]:
    """User + system CPU so far of each thread of a process, by its native id."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            found[int(task.name)] = _cpu_of(task / "stat")
    return found


# Whose CPU a served statement spends, by Python thread name (dpsql's own threads); a thread
# Python does not know is one of DuckDB's.
ROLES = (("MainThread", "event loop"), ("dpsql_", "statement threads"), ("dpsql-ledger-writer", "ledger writer"))


def by_role(before: dict[int, float], after: dict[int, float], names: dict[int, str]) -> dict[str, float]:
    """CPU spent between two `thread_seconds` readings, by the role of each thread."""
    spent: dict[str, float] = {}
    for tid, cpu in after.items():
        name = names.get(tid)
        role = "DuckDB's own" if name is None else next((r for p, r in ROLES if name.startswith(p)), "other")
        spent[role] = spent.get(role, 0.0) + cpu - before.get(tid, 0.0)
    return spent


def _tell_names(path: Path) -> None:
    """In the child: its Python threads' native ids and names, rewritten every 0.2 s."""
    while True:
        text = json.dumps({t.native_id: t.name for t in threading.enumerate()})
        path.with_suffix(".tmp").write_text(text)
        path.with_suffix(".tmp").replace(path)
        time.sleep(0.2)


def drive(dsn: str, query: str, clients: int, statements: int) -> None:
    """`statements` executions of `query`, spread over `clients` concurrent connections."""
    import psycopg

    share = [statements // clients + (i < statements % clients) for i in range(clients)]
    ready = threading.Barrier(clients)

    def worker(n: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            for s in SETUP:
                c.execute(s)
            ready.wait()
            for _ in range(n):
                c.execute(query).fetchall()

    threads = [threading.Thread(target=worker, args=(n,)) for n in share]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@contextlib.contextmanager
def served(policy: Path, ledger: Path, code: Path, profile: Path | None = None, workers: int = 1):
    """The sample served from `code` for the analyst alice: this file's child (one process, under
    cProfile with `profile`) or, with `workers` above 1, `dpsql serve --workers`; yields its DSN
    and the pid whose CPU is read (the supervisor's, under --workers)."""
    from benchmarks.serving import add_logins, dsn_of, free_port, wait_until_up

    add_logins(policy, ledger, "alice")
    port = free_port()
    if workers > 1:  # its output (the logins' passwords) discarded
        cmd = [sys.executable, "-m", "dpsql.cli", "serve", "--policy", str(policy), "--ledger", str(ledger)]
        cmd += ["--port", str(port), "--workers", str(workers)]
    else:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(policy), str(ledger), str(port)]
        cmd += [str(profile)] if profile else []
    env = {**os.environ, "PYTHONPATH": str(code)}
    proc = subprocess.Popen(cmd, cwd=code, env=env, stdout=subprocess.DEVNULL if workers > 1 else None)
    try:
        dsn = dsn_of(port, "alice")
        wait_until_up(dsn, 60)
        yield dsn, proc.pid
    finally:
        proc.terminate()
        proc.wait(60)


def serve_child(policy: str, ledger: str, port: int, profile: str | None) -> None:
    """The server itself (in the child), every thread under cProfile when `profile` names a file."""
    from dpsql.server.launch import ServeOptions, build_server
    from dpsql.server.listener import run

    options = ServeOptions(policy=policy, ledger=ledger, port=port)
    names = Path(ledger).with_name("threads.json")
    threading.Thread(target=_tell_names, args=(names,), name="perquery-names", daemon=True).start()
    if profile is None:
        run(build_server(options))
        return
    profilers: list[cProfile.Profile] = []
    lock = threading.Lock()

    def per_thread(frame, event, arg):  # the first event of a new thread: its own profiler
        sys.setprofile(None)
        p = cProfile.Profile(time.thread_time)
        with lock:
            profilers.append(p)
        p.enable()

    main = cProfile.Profile(time.thread_time)
    profilers.append(main)
    threading.setprofile(per_thread)
    main.enable()
    try:  # built under the hook: the ledger's writer thread and the engine's watchdog are profiled too
        run(build_server(options))
    finally:
        main.disable()
        threading.setprofile(None)
        with lock:
            stats = pstats.Stats(profilers[0])
            for p in profilers[1:]:
                with contextlib.suppress(TypeError):  # a profiler that saw nothing
                    stats.add(p)
        stats.dump_stats(profile)


def _measured(pid: int, family: bool, names: Path, run) -> dict[str, float]:
    """CPU spent by the server while `run()` drives it: "" the whole, "wall" the seconds taken,
    and the rest by role (each thread's in one process, each process's under --workers)."""
    if family:
        before, w0 = family_seconds(pid), time.perf_counter()
        run()
        wall, after = time.perf_counter() - w0, family_seconds(pid)
        spent = {k: after[k] - before[k] for k in after}
        return {"": sum(spent.values()), "wall": wall, **spent}
    t0, c0, w0 = thread_seconds(pid), cpu_seconds(pid), time.perf_counter()
    run()
    cpu, wall, t1 = cpu_seconds(pid) - c0, time.perf_counter() - w0, thread_seconds(pid)
    time.sleep(0.3)  # the child's names, written after every thread started
    named = {int(k): v for k, v in json.loads(names.read_text()).items()}
    return {"": cpu, "wall": wall, **by_role(t0, t1, named)}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        serve_child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else None)
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--statements", type=int, default=2000)
    ap.add_argument("--clients", default="1,8", help="comma-separated client counts")
    ap.add_argument("--profile", type=Path, help="run the server under cProfile; merged statistics to this file")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--code", type=Path, default=Path(__file__).resolve().parent.parent, help="dpsql served from here")
    ap.add_argument("--only", help="run only the query whose label starts with this")
    ap.add_argument("--filter", help="the analysts' filter (the sample's is basic)")
    ap.add_argument("--workers", type=int, default=1, help="serve as `dpsql serve --workers N` (N > 1)")
    args = ap.parse_args()
    if args.workers > 1 and args.profile:
        ap.error("--profile profiles one process: leave --workers out")
    from benchmarks.serving import sample_policy

    queries = {k: v for k, v in QUERIES.items() if args.only is None or k.startswith(args.only)}
    with tempfile.TemporaryDirectory() as d:
        policy = sample_policy(Path(d))
        if args.filter:
            text = policy.read_text()
            assert 'filter = "basic"' in text
            text = text.replace('filter = "basic"', f'filter = "{args.filter}"')
            policy.write_text(text.replace("epsilon = 1e12", "epsilon = 1e5"))  # within every filter's reach
        with served(policy, Path(d) / "ledger.sqlite", args.code.resolve(), args.profile, args.workers) as (dsn, pid):
            print(f"load average {os.getloadavg()[0]:.2f} at the start")
            by = "process" if args.workers > 1 else "thread"
            for label, (query, share) in queries.items():
                n = max(8, round(args.statements * share))
                drive(dsn, query, 8, max(8, n // 10))  # warm: weighted copies, plans, Describe
                for clients in (int(c) for c in args.clients.split(",")):
                    names = Path(d) / "threads.json"
                    split = _measured(pid, args.workers > 1, names, lambda: drive(dsn, query, clients, n))
                    cpu, wall = split.pop(""), split.pop("wall")
                    split = sorted(split.items(), key=lambda kv: -kv[1])
                    print(
                        f"{label}, {clients} client(s), {n} statements: server CPU {cpu / n * 1000:.3f} ms per "
                        f"statement, {n / wall:.0f} statements/s (load {os.getloadavg()[0]:.2f})\n    by {by}: "
                        + ", ".join(f"{role} {c / n * 1000:.3f}" for role, c in split if c > 0)
                        + " ms",
                        flush=True,
                    )
    if args.profile:
        stats = pstats.Stats(str(args.profile))
        stats.sort_stats("cumulative").print_stats(args.top)
        stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
