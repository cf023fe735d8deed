"""Latency against rows per system, from the benchmark's results JSON (runs in the peers' venv,
which has matplotlib; dpsql itself does not need it).

    python benchmarks/peers/plot.py RESULTS.json latency_vs_rows.png
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

results = json.load(open(sys.argv[1]))
queries = ["count_by_grp", "sum_by_grp", "avg_by_grp"]
fig, axes = plt.subplots(1, len(queries), figsize=(13, 4), sharey=True)
for ax, name in zip(axes, queries):
    for system, points in sorted(results["scale"].get(name, {}).items()):
        xs = sorted(int(k) for k in points)
        ax.plot(xs, [points[str(x)] if str(x) in points else points[x] for x in xs], marker="o", label=system)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title(name.replace("_", " "))
    ax.set_xlabel("rows")
    ax.grid(True, which="both", alpha=0.3)
axes[0].set_ylabel("median latency (ms)")
axes[-1].legend()
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
