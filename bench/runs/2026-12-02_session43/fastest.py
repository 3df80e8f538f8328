#!/usr/bin/env python3
# Per row of `qmoe bench` logs run with several --gemm-paths: each path's layer µs (median over the
# logs given), the fastest forced path, and the forced path whose GEMM µs the automatic one matched:
#   python3 fastest.py LOG...
import sys, collections, statistics
experts = {'mixtral-8x7b': (8, 2), 'deepseek-v3': (256, 8), 'qwen3-30b-a3b': (128, 8), 'gpt-oss-120b': (128, 4),
           'deepseek-v3-tp8': (256, 8), 'kimi-k2-tp8': (384, 8)}
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for name in sys.argv[1:]:
    for line in open(name):
        p = line.split()
        if len(p) >= 6 and p[0] in experts and p[3].isdigit():
            rows[(p[0], p[1], int(p[3]))][p[2]].append((float(p[4]), float(p[5])))
for key in sorted(rows):
    r = {path: (statistics.median(v[0] for v in runs), statistics.median(v[1] for v in runs))
         for path, runs in rows[key].items()}
    e, top_k = experts[key[0]]
    forced = {path: v for path, v in r.items() if path != 'auto'}
    if not forced: continue
    fastest = min(forced, key=lambda path: forced[path][0])
    cells = '  '.join(f"{path} {v[0]:8.1f}" for path, v in sorted(forced.items()))
    auto = ''
    if 'auto' in r:
        matched = min(forced, key=lambda path: abs(forced[path][1] - r['auto'][1]))
        auto = f"  auto {r['auto'][0]:8.1f} (~{matched}, {r['auto'][0] / forced[fastest][0]:.3f} of fastest)"
    print(f"{key[0]:16s} {key[1]:16s} {key[2]:5d} rows {key[2] * top_k / e:6.1f}  {cells}  fastest {fastest}{auto}")
