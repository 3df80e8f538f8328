#!/usr/bin/env python3
"""Summarizes an A/B of two `qmoe bench` binaries run in alternated rounds (tools/gpu_ab.sh).

    python3 tools/bench_ab.py DIR

DIR holds a1.json, b1.json, a2.json, b2.json, ... (`qmoe bench --json` of binary A and binary B,
round by round). Prints, per (model, scheme, path, tokens) measured by both, every round's GEMM
µs, the medians and B / A of the medians, for the GEMM part and the whole layer.
"""
import json
import os
import re
import statistics
import sys


def load_rounds(directory):
    """{"a": [rows of round 1, ...], "b": [...]}, rounds in order."""
    rounds = {"a": {}, "b": {}}
    for name in os.listdir(directory):
        m = re.fullmatch(r"([ab])(\d+)\.json", name)
        if m:
            with open(os.path.join(directory, name)) as f:
                rounds[m.group(1)][int(m.group(2))] = json.load(f)
    return {side: [rounds[side][k] for k in sorted(rounds[side])] for side in rounds}


def summarize(rounds):
    """Rows (key, a_gemm, b_gemm, a_layer, b_layer): per-round lists, keys in first-seen order."""
    table = {}
    for side in ("a", "b"):
        for rows in rounds[side]:
            for r in rows:
                key = (r["model"], r["scheme"], r.get("path", "auto"), r["tokens"])
                entry = table.setdefault(key, {"a": ([], []), "b": ([], [])})
                entry[side][0].append(r["gemm_us"])
                entry[side][1].append(r["layer_us"])
    return [(k, v["a"][0], v["b"][0], v["a"][1], v["b"][1]) for k, v in table.items() if v["a"][0] and v["b"][0]]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rounds = load_rounds(sys.argv[1])
    if not rounds["a"] or not rounds["b"]:
        sys.exit(f"bench_ab.py: no a<N>.json and b<N>.json in {sys.argv[1]}")
    print(f"A/B, {len(rounds['a'])} / {len(rounds['b'])} rounds; medians; ratio = B / A")
    print(f"{'model':16} {'scheme':12} {'path':8} {'tokens':>6} | {'GEMM A (rounds)':>26} {'GEMM B (rounds)':>26} "
          f"{'ratio':>6} | {'layer A':>9} {'layer B':>9} {'ratio':>6}")
    for (model, scheme, path, tokens), ga, gb, la, lb in summarize(rounds):
        mga, mgb, mla, mlb = (statistics.median(v) for v in (ga, gb, la, lb))
        rounds_a = " ".join(f"{v:.1f}" for v in ga)
        rounds_b = " ".join(f"{v:.1f}" for v in gb)
        print(f"{model:16} {scheme:12} {path:8} {tokens:6} | {rounds_a:>26} {rounds_b:>26} {mgb / mga:6.3f} | "
              f"{mla:9.1f} {mlb:9.1f} {mlb / mla:6.3f}")


if __name__ == "__main__":
    main()
