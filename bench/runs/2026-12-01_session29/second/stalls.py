#!/usr/bin/env python3
# Summarizes ncu's per-SASS-instruction source counters of the int8 register kernel (the CSV in
# ab_p.tgz: int8_stalls_sass.csv): stall reasons overall and by region (the consumers' k-loop: the
# instructions executed once per consumer warp and k-tile; the producers' spin loops; the rest),
# instruction mix of the k-loop, shared-load bank conflicts.
#   tar xzf ab_p.tgz int8_stalls_sass.csv && python3 stalls.py int8_stalls_sass.csv
import collections, csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = rows[1]
data = [r for r in rows[2:] if len(r) == len(head)]
num = lambda x: float(x) if x.replace('.', '', 1).isdigit() else 0.0
stall = range(head.index('stall_barrier'), head.index('stall_wait') + 1)
loop_count = max(collections.Counter(num(r[5]) for r in data if 'LDS' in r[1]).items(), key=lambda x: x[0])[0]
regions, reasons, ops = collections.Counter(), collections.defaultdict(collections.Counter), collections.Counter()
for r in data:
    n = num(r[5])
    region = 'k-loop' if n == loop_count else 'spin' if 'TRYWAIT' in r[1] or 'YIELD' in r[1] or n > 1e6 else 'other'
    regions[region] += num(r[2])
    for i in stall: reasons[region][head[i]] += num(r[i])
    if region == 'k-loop':
        op = r[1].split()
        ops[(op[1] if op[0].startswith('@') else op[0]).split('.')[0]] += 1
total = sum(regions.values())
print(f"warp samples {total:.0f}; shared wavefronts {sum(num(r[19]) for r in data):.0f}, "
      f"excessive {sum(num(r[18]) for r in data):.0f}")
for region, samples in regions.most_common():
    top = ', '.join(f"{k[6:]} {v / samples:.0%}" for k, v in reasons[region].most_common(6))
    print(f"{region:7s} {samples / total:5.1%} of samples: {top}")
print(f"k-loop: {sum(ops.values())} instructions per consumer warp and k-tile (executed {loop_count:.0f} times):",
      ', '.join(f"{k} {v}" for k, v in ops.most_common(12)))
