"""`dpsql serve` latency and throughput, beside the embedded DB-API, in one run.

    python -m benchmarks.server [--n 200] [--clients 50] [--seconds 10]

Serves the sample hospital (a copy of its policy with a large budget, fresh ledger), then:
median round-trip of SHOW dpsql.budget and of a small DP query over psycopg 3 (cache off, so each
query is planned, charged and noised), the same DP query through dpsql.connect, and queries per
second with N concurrent psycopg clients.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

import dpsql

from .timing import median_ms

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data"
QUERY = "SELECT sex, COUNT(*), AVG(age) FROM patients WHERE age > 30 GROUP BY sex"
PASSWORD = "bench-password"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--port", type=int, default=55491)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        policy = Path(d) / "hospital.toml"
        text = (SAMPLE / "dpsql.toml").read_text().replace('source = "', f'source = "{SAMPLE}/')
        policy.write_text(text.replace("epsilon = 10.0", "epsilon = 1e12").replace("epsilon = 5.0", "epsilon = 1e12"))
        ledger = Path(d) / "ledger.sqlite"
        subprocess.run([sys.executable, "-m", "dpsql.cli", "users", "add", "-p", str(policy), "--ledger", str(ledger),
                        "alice", "--password-stdin"], input=PASSWORD + "\n", text=True, check=True, capture_output=True)
        server = subprocess.Popen([sys.executable, "-m", "dpsql.cli", "serve", "-p", str(policy), "--ledger", str(ledger),
                                   "--port", str(args.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dsn = f"host=127.0.0.1 port={args.port} dbname=dpsql user=alice password={PASSWORD} sslmode=disable"
        try:
            for _ in range(100):
                try:
                    psycopg.connect(dsn).close()
                    break
                except psycopg.OperationalError:
                    time.sleep(0.1)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SET dpsql.cache = off")
                for _ in range(5):
                    conn.execute(QUERY).fetchall()
                show = median_ms(lambda: conn.execute("SHOW dpsql.budget").fetchall(), args.n)
                wire = median_ms(lambda: conn.execute(QUERY).fetchall(), args.n)
            local = dpsql.connect(policy, user="alice", ledger=Path(d) / "local.sqlite")
            cur = local.cursor()
            cur.execute("SET dpsql.cache = off")
            for _ in range(5):
                cur.execute(QUERY)
            embedded = median_ms(lambda: cur.execute(QUERY), args.n)
            print(f"median round-trip over psycopg: SHOW dpsql.budget {show:.2f} ms, DP query {wire:.2f} ms; "
                  f"same DP query through the embedded DB-API {embedded:.2f} ms (wire/embedded {wire / embedded:.2f}x)")
            for clients in sorted({1, 8, args.clients}):
                done = [0] * clients
                stop = time.monotonic() + args.seconds
                ready = threading.Barrier(clients + 1)

                def worker(i: int) -> None:
                    with psycopg.connect(dsn, autocommit=True) as c:
                        c.execute("SET dpsql.cache = off")
                        ready.wait()
                        while time.monotonic() < stop:
                            c.execute(QUERY).fetchall()
                            done[i] += 1

                threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
                for t in threads:
                    t.start()
                ready.wait()
                start = time.monotonic()
                stop = start + args.seconds
                for t in threads:
                    t.join()
                print(f"{clients:>3} concurrent clients: {sum(done) / (time.monotonic() - start):.1f} DP queries/s")
        finally:
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    main()
