"""python -m dpsql.audit [--quick] [--runs N] [--out FILE]: run the audit, print the table,
exit 1 if any case's lower bound on epsilon exceeds what dpsql charged for it."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import CASES, markdown, run_audit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dpsql.audit", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a few cases, about a minute")
    parser.add_argument("--runs", type=int, help="runs per dataset for every case (default: each case's own)")
    parser.add_argument("--out", type=Path, help="also write the Markdown report to this file")
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="chance of flagging a correct dpsql, split over the cases (default 0.05)",
    )
    parser.add_argument("--cases", help="comma-separated case names (default: all, or the quick ones)")
    args = parser.parse_args(argv)
    if args.runs is not None and args.runs < 4:
        parser.error("--runs must be at least 4")
    cases = None
    if args.cases:
        names = [n.strip() for n in args.cases.split(",") if n.strip()]
        unknown = sorted(set(names) - {c.name for c in CASES})
        if unknown:
            parser.error(f"unknown case {unknown[0]!r}; cases: {', '.join(c.name for c in CASES)}")
        cases = tuple(c for c in CASES if c.name in names)

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    start = time.perf_counter()
    results = run_audit(
        cases, quick=args.quick, runs=args.runs, alpha=args.alpha, progress=None if args.quick else progress
    )
    report = markdown(results)
    report += f"\nWall time: {time.perf_counter() - start:.0f} s\n"
    print(report, end="")
    if args.out:
        args.out.write_text(report, encoding="utf-8")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
