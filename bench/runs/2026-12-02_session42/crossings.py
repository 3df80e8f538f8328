#!/usr/bin/env python3
# Decode against the 32-row register tile per row of `qmoe bench` logs run with
# --gemm-paths auto,decode,prefill:4 (layer and GEMM µs, the mean rows per expert, which path the
# automatic one matched, which forced path had the faster layer):
#   python3 crossings.py LOG...
import sys, collections
experts = {'mixtral-8x7b': (8, 2), 'deepseek-v3': (256, 8), 'qwen3-30b-a3b': (128, 8), 'gpt-oss-120b': (128, 4),
           'deepseek-v3-tp8': (256, 8), 'kimi-k2-tp8': (384, 8)}
rows = collections.defaultdict(dict)
for name in sys.argv[1:]:
    for line in open(name):
        p = line.split()
        if len(p) >= 6 and p[0] in experts and p[3].isdigit():
            rows[(p[0], p[1], int(p[3]))][p[2]] = (float(p[4]), float(p[5]))
for key in sorted(rows):
    r = rows[key]
    if not {'auto', 'decode', 'prefill:4'} <= r.keys(): continue
    e, top_k = experts[key[0]]
    a, d, t = r['auto'], r['decode'], r['prefill:4']
    matched = 'decode' if abs(a[1] - d[1]) < abs(a[1] - t[1]) else 'r32'
    print(f"{key[0]:16s} {key[1]:16s} {key[2]:5d} rows {key[2] * top_k / e:5.1f}  layer decode {d[0]:7.1f} r32 {t[0]:7.1f}"
          f"  gemm decode {d[1]:7.1f} r32 {t[1]:7.1f}  auto {a[0]:7.1f} ({matched})  faster {'decode' if d[0] < t[0] else 'r32'}")
