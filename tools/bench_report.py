#!/usr/bin/env python3
"""Merges `qmoe bench --json` and the torch baseline into bench/RESULTS.md rows and a plot.

    python3 tools/bench_report.py qmoe_bench.json torch_baseline.json OUT_DIR "header text"
"""
import json
import sys


def plot(rows, value, baselines, ylabel, out_png):
    """One line per (model, scheme, path) of value(row) against tokens, plus dashed baseline lines
    ({label: {tokens: value}})."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    series = {}
    for r in rows:
        series.setdefault((r["model"], r["scheme"], r.get("path", "auto")), []).append((r["tokens"], value(r)))
    for (model, scheme, path), pts in sorted(series.items()):
        pts.sort()
        label = f"{model} {scheme}" + ("" if path == "auto" else f" ({path})")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    for label, pts in sorted(baselines.items()):
        xs = sorted(pts)
        ax.plot(xs, [pts[x] for x in xs], linestyle="--", color="gray", alpha=0.6, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)


def main():
    rows = json.load(open(sys.argv[1]))
    base = {(b["model"], b["tokens"]): b for b in json.load(open(sys.argv[2]))}
    out_dir, header = sys.argv[3], sys.argv[4]
    lines = [header, "",
             "| model | scheme | path | tokens | layer µs | GEMM µs | unique weight MB | TB/s | TFLOP/s | roofline | torch bf16 µs | torch fp8 µs | vs torch |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        b = base.get((r["model"], r["tokens"]), {})
        ref = b.get("fp8_us") if r["scheme"].startswith(("fp8", "int8", "w4a8")) else b.get("bf16_us")
        speed = f"{ref / r['gemm_us']:.2f}x" if ref and r["gemm_us"] > 0 else "n/a"
        fmt = lambda v: f"{v:.1f}" if isinstance(v, (int, float)) else "n/a"
        lines.append(f"| {r['model']} | {r['scheme']} | {r.get('path', 'auto')} | {r['tokens']} | {r['layer_us']:.1f} | {r['gemm_us']:.1f} | "
                     f"{r['unique_weight_bytes'] / 1e6:.1f} | {r['tb_per_s']:.2f} | {r['tflops']:.1f} | "
                     f"{r['roofline_fraction']:.2f} | {fmt(b.get('bf16_us'))} | {fmt(b.get('fp8_us'))} | {speed} |")
    open(f"{out_dir}/results.md", "w").write("\n".join(lines) + "\n")
    try:
        plot(rows, lambda r: r["tb_per_s"] * 1e3 / r["copy_gbs"], {},
             "unique weight bytes / GEMM time, fraction of copy bandwidth", f"{out_dir}/bandwidth.png")
        # Compute rate (prefill), with the torch baseline of each row's compute type.
        torch_series = {}
        for r in rows:
            b = base.get((r["model"], r["tokens"]), {})
            kind = "fp8" if r["scheme"].startswith(("fp8", "int8", "w4a8")) else "bf16"
            if b.get(f"{kind}_us"):
                torch_series.setdefault(f"{r['model']} torch {kind} grouped", {})[r["tokens"]] = \
                    r["flops"] / b[f"{kind}_us"] / 1e6
        plot(rows, lambda r: r["tflops"], torch_series, "TFLOP/s (GEMMs)", f"{out_dir}/tflops.png")
    except Exception as e:
        print("plot skipped:", e)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
