# Warp stall samples of the register kernel by 2 KB block of SASS, from ncu's source page CSV
# (--page source --csv --print-source sass): python3 regions.py SOURCE.csv KERNEL_INDEX (the page lists
# each kernel twice, so GEMM1 is 0 and GEMM2 2 here).
# 'maxexec' is the block's most-executed instruction count; 'hgmma' / 'mufu' count the block's
# HGMMA and MUFU.EX2 instructions (the k-loop and the activation epilogue).
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
which = int(sys.argv[2])
k, hdr, base = -1, None, None
blocks = {}
for r in rows:
    if r and r[0] == 'Kernel Name':
        k += 1
        continue
    if r and r[0] == 'Address':
        hdr = {n: i for i, n in enumerate(r)}
        continue
    if k != which or not hdr or len(r) < 5:
        continue
    a = int(r[0], 16)
    base = a if base is None else base
    b = (a - base) // 0x800
    s = float(r[hdr['Warp Stall Sampling (All Samples)']] or 0)
    e = int(float(r[hdr['Instructions Executed']] or 0))
    v = blocks.setdefault(b, [0.0, 0, 0, 0])
    v[0] += s
    v[1] = max(v[1], e)
    v[2] += 'HGMMA' in r[1]
    v[3] += 'MUFU.EX2' in r[1]
total = sum(v[0] for v in blocks.values())
print(f"# kernel {which}: total samples {total:.0f}")
kloop = sum(v[0] for v in blocks.values() if v[2]) / total
epi = sum(v[0] for v in blocks.values() if v[3] and not v[2]) / total
print(f"# blocks with HGMMA (k-loop) {kloop:.3f}; with MUFU.EX2 and no HGMMA (activation epilogue) {epi:.3f}")
for b in sorted(blocks):
    v = blocks[b]
    if v[0] / total >= 0.004:
        print(f"+0x{b * 0x800:05x} {v[0] / total:.3f} maxexec {v[1]:8d} hgmma {v[2]:2d} mufu {v[3]:2d}")
