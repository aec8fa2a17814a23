#!/usr/bin/python3
"""Plots bench/cc/dcqcn_bench's JSON: for each profile and flow count, every flow's DCQCN rate
(Gb/s, left axis) and the bottleneck queue (KB, right axis, grey) over time, with Kmin and Kmax.
Usage: plot.py JSON PNG"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

doc = json.load(open(sys.argv[1]))
cases = doc["cases"]
rows = (len(cases) + 1) // 2
fig, axes = plt.subplots(rows, 2, figsize=(12, 3.5 * rows), sharex=True)
for ax, c in zip(axes.flat, cases):
    t = [s["t_ms"] for s in c["samples"]]
    n = c["flows"]
    for f in range(n):
        ax.plot(t, [s["rate_gbps"][f] for s in c["samples"]], linewidth=0.8)
    gbps = c.get("link_gbps", 10)
    ax.set_ylim(0, gbps * 1.05)
    ax.set_ylabel("flow rate RC (Gb/s)")
    q = ax.twinx()
    q.plot(t, [s["queue_kb"] for s in c["samples"]], color="0.4", linewidth=0.6, alpha=0.6)
    q.axhline(c.get("kmin_kb", 40), color="0.6", linestyle=":", linewidth=0.8)
    q.axhline(c.get("kmax_kb", 160), color="0.6", linestyle=":", linewidth=0.8)
    lossless = c.get("fabric") == "lossless"
    if lossless:
        q.axhline(c["pfc_xoff_kb"], color="tab:red", linestyle="--", linewidth=0.8)
    q.set_ylim(0, 400 * gbps / 10 if gbps > 10 else 400)
    q.set_ylabel("queue (KB), Kmin/Kmax dotted", color="0.4")
    conv = c["convergence_ms"]
    pfc = f", PFC (XOFF dashed; paused {c['paused_share']:.2f})" if lossless else ""
    ax.set_title(f"{c['profile']}, {gbps:g} Gb/s{pfc}, {n} flows\nJain {c['jain']:.3f}, util {c['utilisation']:.2f}, "
                 f"converged {'never' if conv is None else f'{conv:.1f} ms'}, drops {c['drops']}",
                 fontsize=9)
for ax in axes[-1]:
    ax.set_xlabel("time (ms, virtual clock)")
fig.suptitle("DCQCN on droce's sim fabric: N flows from line rate into one RED port")
fig.tight_layout(rect=(0, 0, 1, 0.985))
fig.savefig(sys.argv[2], dpi=100)
print("wrote", sys.argv[2])
