#!/usr/bin/env python3
"""Uniform against balanced routing from this folder's runs (extra/torch_*, fp4/routing_*): writes
the table of routing_summary.txt to stdout. Run from this folder."""
import glob, json, lzma, statistics


def load(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def bench(routing):
    q = load(glob.glob(f"extra/torch_{routing}/qmoe_bench.json*")[0])
    t = {(r["model"], r["tokens"]): r for r in load(f"extra/torch_{routing}/torch_baseline.json")}
    return {(r["model"], r["scheme"], r["tokens"]): r for r in q}, t


qb, tb = bench("balanced")
qu, tu = bench("uniform")
print("Uniform vs balanced routing, one call (extra/torch_*/): GEMM us and TFLOP/s of qmoe's automatic path,")
print("torch's grouped GEMMs on the same routed problems; gain = uniform / balanced time.")
print(f"{'model':<14} {'scheme':<12} {'tokens':>6} | {'qmoe unif':>9} {'bal':>8} {'gain':>5} {'TF/s unif':>9} {'bal':>6} | "
      f"{'torch unif':>10} {'bal':>8} {'gain':>5} | {'vs torch unif':>13} {'bal':>5}")
for k, u in qu.items():
    b = qb[k]
    key = "fp8_us" if k[1].startswith("fp8") else "bf16_us"
    t_u, t_b = tu[(k[0], k[2])][key], tb[(k[0], k[2])][key]
    print(f"{k[0]:<14} {k[1]:<12} {k[2]:>6} | {u['gemm_us']:>9.1f} {b['gemm_us']:>8.1f} {u['gemm_us'] / b['gemm_us']:>5.2f} "
          f"{u['tflops']:>9.1f} {b['tflops']:>6.1f} | {t_u:>10.1f} {t_b:>8.1f} {t_u / t_b:>5.2f} | "
          f"{t_u / u['gemm_us']:>12.2f}x {t_b / b['gemm_us']:>4.2f}x")
print()
print("Second measurement (fp4/routing_*_r{1,2}.log, --split-gemms, two rounds in both orders): medians")


def rounds(routing):
    d = {}
    for f in sorted(glob.glob(f"fp4/routing_{routing}_r*.json*")):
        for r in load(f):
            d.setdefault((r["model"], r["scheme"], r["tokens"]), []).append(r)
    return d


ru, rb = rounds("uniform"), rounds("balanced")
med = lambda rows, field: statistics.median(r[field] for r in rows)
print(f"{'model':<14} {'scheme':<12} {'tokens':>6} | {'GEMM unif':>9} {'bal':>8} {'gain':>5} | {'gemm1 gain':>10} {'gemm2 gain':>10}")
for k, u in ru.items():
    b = rb[k]
    print(f"{k[0]:<14} {k[1]:<12} {k[2]:>6} | {med(u, 'gemm_us'):>9.1f} {med(b, 'gemm_us'):>8.1f} "
          f"{med(u, 'gemm_us') / med(b, 'gemm_us'):>5.2f} | {med(u, 'gemm1_us') / med(b, 'gemm1_us'):>10.2f} "
          f"{med(u, 'gemm2_us') / med(b, 'gemm2_us'):>10.2f}")
