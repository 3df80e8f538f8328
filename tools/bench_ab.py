#!/usr/bin/env python3
"""Summarizes an A/B of two `qmoe bench` binaries run in alternated rounds (tools/gpu_ab.sh), or of
two GEMM paths of one binary (tools/gpu_sweep.sh).

    python3 tools/bench_ab.py DIR
    python3 tools/bench_ab.py DIR --paths PATH_A PATH_B

DIR holds a1.json, b1.json, a2.json, b2.json, ... (`qmoe bench --json` of binary A and binary B,
round by round), or with --paths r1.json, r2.json, ... (one binary's rounds, each with rows of both
paths; A is PATH_A's rows, B PATH_B's). Prints, per (model, scheme, path, tokens) measured by both
(with --paths: per (model, scheme, tokens)), every round's GEMM µs, the medians and B / A of the
medians, for the GEMM part and the whole layer, and with --paths GEMM1's and GEMM2's B / A where
the rounds split the GEMMs (`qmoe bench --split-gemms`).
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


def load_path_rounds(directory, path_a, path_b):
    """The same shape as load_rounds from r<N>.json: side a the rows of path_a, b those of path_b,
    the path dropped from each row so that the two sides' rows share a key."""
    files = {}
    for name in os.listdir(directory):
        m = re.fullmatch(r"r(\d+)\.json", name)
        if m:
            with open(os.path.join(directory, name)) as f:
                files[int(m.group(1))] = json.load(f)
    rounds = {"a": [], "b": []}
    for k in sorted(files):
        for side, path in (("a", path_a), ("b", path_b)):
            rounds[side].append([dict(r, path="-") for r in files[k] if r.get("path", "auto") == path])
    return rounds


def median_ratio(rounds, key, field):
    """B / A of the medians of `field` over the rounds' rows with `key`; None where a row lacks it."""
    values = {}
    for side in ("a", "b"):
        values[side] = [r[field] for rows in rounds[side] for r in rows
                        if (r["model"], r["scheme"], r["tokens"]) == key and field in r]
    if not values["a"] or not values["b"]:
        return None
    return statistics.median(values["b"]) / statistics.median(values["a"])


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
    args = sys.argv[1:]
    paths = None
    if len(args) == 4 and args[1] == "--paths":
        paths = args[2:]
    elif len(args) != 1:
        sys.exit(__doc__)
    if paths:
        rounds = load_path_rounds(args[0], *paths)
        if not any(rounds["a"]) or not any(rounds["b"]):
            sys.exit(f"bench_ab.py: no rows of path {paths[0]} and of path {paths[1]} in {args[0]}/r<N>.json")
        print(f"A = {paths[0]}, B = {paths[1]}, {len(rounds['a'])} rounds; medians; ratio = B / A")
    else:
        rounds = load_rounds(args[0])
        if not rounds["a"] or not rounds["b"]:
            sys.exit(f"bench_ab.py: no a<N>.json and b<N>.json in {args[0]}")
        print(f"A/B, {len(rounds['a'])} / {len(rounds['b'])} rounds; medians; ratio = B / A")
    split = " | gemm1  gemm2" if paths else ""
    print(f"{'model':16} {'scheme':12} {'path':8} {'tokens':>6} | {'GEMM A (rounds)':>26} {'GEMM B (rounds)':>26} "
          f"{'ratio':>6} | {'layer A':>9} {'layer B':>9} {'ratio':>6}{split}")
    for (model, scheme, path, tokens), ga, gb, la, lb in summarize(rounds):
        mga, mgb, mla, mlb = (statistics.median(v) for v in (ga, gb, la, lb))
        rounds_a = " ".join(f"{v:.1f}" for v in ga)
        rounds_b = " ".join(f"{v:.1f}" for v in gb)
        line = (f"{model:16} {scheme:12} {path:8} {tokens:6} | {rounds_a:>26} {rounds_b:>26} {mgb / mga:6.3f} | "
                f"{mla:9.1f} {mlb:9.1f} {mlb / mla:6.3f}")
        if paths:
            g12 = [median_ratio(rounds, (model, scheme, tokens), f) for f in ("gemm1_us", "gemm2_us")]
            line += " | " + " ".join("     -" if g is None else f"{g:6.3f}" for g in g12)
        print(line)


if __name__ == "__main__":
    main()
