#!/usr/bin/env python3
"""Torch grouped-GEMM baselines on the routed problems of a `qmoe bench --json` run.

For every row of the qmoe bench JSON (model shape, tokens, per-expert token counts of each
rotation), time GEMM1 + GEMM2 of the same routed problem with torch._grouped_mm (bf16) and
torch._scaled_grouped_mm (FP8 e4m3, row-wise scales), by CUDA-graph replay over the same
rotations, median of the replays; bf16's GEMM2 also alone. Writes a JSON list of {model, tokens,
bf16_us, bf16_gemm2_us, fp8_us, notes}.

    python3 tools/bench_torch_baseline.py qmoe_bench.json torch_baseline.json
"""
import json
import statistics
import sys

import torch


def offsets_of(counts, pad):
    """int32 cumulative group ends; with pad each group is rounded up to a multiple of `pad` rows."""
    ends, total = [], 0
    for c in counts:
        total += -(-c // pad) * pad if pad > 1 else c
        ends.append(total)
    return torch.tensor(ends, dtype=torch.int32, device="cuda"), total


def time_graph(fn, rotations, replays=20):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for r in range(rotations):  # warm-up outside the graph (allocations, kernel selection)
            fn(r)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for r in range(rotations):
            fn(r)
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(replays):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / rotations)
    return statistics.median(times)


def run_row(row):
    E, H, I = row["experts"], row["hidden"], row["inter"]
    rotations = row["expert_counts"]
    out = {"model": row["model"], "tokens": row["tokens"], "notes": []}
    gen = torch.Generator(device="cuda").manual_seed(0)
    w13 = torch.randn(E, 2 * I, H, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
    w2 = torch.randn(E, H, I, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
    for pad in (1, 16):
        try:
            problems = []
            for counts in rotations:
                offs, total = offsets_of(counts, pad)
                a = torch.randn(max(total, 1), H, device="cuda", dtype=torch.bfloat16, generator=gen)
                inter = torch.empty(max(total, 1), I, device="cuda", dtype=torch.bfloat16)
                problems.append((offs, a, inter))

            def bf16(r):
                offs, a, inter = problems[r]
                h = torch._grouped_mm(a, w13.transpose(-2, -1), offs=offs)
                inter.copy_(h[:, :I])
                torch._grouped_mm(inter, w2.transpose(-2, -1), offs=offs)

            def bf16_gemm2(r):
                offs, _, inter = problems[r]
                torch._grouped_mm(inter, w2.transpose(-2, -1), offs=offs)

            out["bf16_us"] = time_graph(bf16, len(problems))
            # GEMM2 alone (GEMM1 with its copy: the rest), to set beside qmoe bench --split-gemms.
            out["bf16_gemm2_us"] = time_graph(bf16_gemm2, len(problems))
            if pad > 1:
                out["notes"].append(f"bf16 groups padded to {pad} rows")
            break
        except Exception as e:  # report, try the padded layout
            out["notes"].append(f"bf16 pad {pad}: {type(e).__name__}: {str(e)[:160]}")
    del w13, w2
    try:
        f8 = torch.float8_e4m3fn
        w13 = (torch.randn(E, 2 * I, H, device="cuda") * 0.5).to(f8)
        w2 = (torch.randn(E, H, I, device="cuda") * 0.5).to(f8)
        s13 = torch.rand(E, 2 * I, device="cuda") * 0.01 + 0.001
        s2 = torch.rand(E, H, device="cuda") * 0.01 + 0.001
        problems = []
        for counts in rotations:
            offs, total = offsets_of(counts, 16)
            a = (torch.randn(max(total, 16), H, device="cuda") * 0.5).to(f8)
            sa = torch.rand(a.shape[0], device="cuda") * 0.01 + 0.001
            inter = (torch.randn(a.shape[0], I, device="cuda") * 0.5).to(f8)
            problems.append((offs, a, sa, inter))

        def fp8(r):
            offs, a, sa, inter = problems[r]
            torch._scaled_grouped_mm(a, w13.transpose(-2, -1), sa, s13, offs=offs, out_dtype=torch.bfloat16)
            torch._scaled_grouped_mm(inter, w2.transpose(-2, -1), sa, s2, offs=offs, out_dtype=torch.bfloat16)

        out["fp8_us"] = time_graph(fp8, len(problems))
        out["notes"].append("fp8 groups padded to 16 rows")
    except Exception as e:
        out["notes"].append(f"fp8: {type(e).__name__}: {str(e)[:160]}")
    torch.cuda.empty_cache()
    return out


def main():
    rows = json.load(open(sys.argv[1]))
    seen, results = set(), []
    for row in rows:
        key = (row["model"], row["tokens"])
        if key in seen:
            continue
        seen.add(key)
        res = run_row(row)
        print(f"{res['model']:<16} {res['tokens']:>6} bf16 {res.get('bf16_us', float('nan')):10.1f} us "
              f"(gemm2 {res.get('bf16_gemm2_us', float('nan')):8.1f})  "
              f"fp8 {res.get('fp8_us', float('nan')):10.1f} us  {'; '.join(res['notes'])}", flush=True)
        results.append(res)
    json.dump(results, open(sys.argv[2], "w"), indent=1)


if __name__ == "__main__":
    main()
