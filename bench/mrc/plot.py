#!/usr/bin/python3
"""Plots the plane-failure timeline of bench/mrc/mrc_bench's JSON: per-plane and total throughput
over time, with the failure and the recovery marked. Usage: plot.py JSON PNG"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

doc = json.load(open(sys.argv[1]))
tl = doc["timeline"]
t = [s["t_ms"] for s in tl["samples"]]
fig, ax = plt.subplots(figsize=(8, 4.2))
for p in range(4):
    ax.plot(t, [s[f"plane{p}_gbps"] for s in tl["samples"]], label=f"plane {p}")
ax.plot(t, [s["goodput_gbps"] for s in tl["samples"]], "k--", label="goodput (all planes)")
ax.axvline(tl["cut_ms"], color="r", linestyle=":")
ax.axvline(tl["heal_ms"], color="g", linestyle=":")
ax.text(tl["cut_ms"], 41, " plane 2 black-holed", color="r", va="top")
ax.text(tl["heal_ms"], 41, " plane 2 healed", color="g", va="top")
ax.set_xlabel("time (ms, virtual clock)")
ax.set_ylabel("Gb/s sent (per plane) / goodput")
ax.set_ylim(0, 43)
ax.set_title("One MRC QP over four 10 Gb/s planes: a plane fails and comes back")
ax.legend(loc="center right", fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
print("wrote", sys.argv[2])
