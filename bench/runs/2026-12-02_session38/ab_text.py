#!/usr/bin/env python3
# Medians over rounds of two sets of `qmoe bench` text logs (A and B globs in DIR), B / A per row:
#   python3 ab_text.py DIR "GLOB_A" "GLOB_B"
import sys,re,glob,statistics as st,collections
# usage: ab.py DIR PATTERN_A PATTERN_B   (globs, rounds)
d,pa,pb=sys.argv[1:4]
def load(pat):
    rows=collections.defaultdict(lambda:{"layer":[],"gemm":[]})
    for f in sorted(glob.glob(f"{d}/{pat}")):
        for line in open(f):
            p=line.split()
            if len(p)>=6 and p[3].isdigit():
                try: k=(p[0],p[1],p[2],int(p[3])); rows[k]["layer"].append(float(p[4])); rows[k]["gemm"].append(float(p[5]))
                except ValueError: pass
    return rows
A,B=load(pa),load(pb)
lr=[];gr=[]
for k in A:
    if k not in B or not A[k]["layer"] or not B[k]["layer"]: continue  # (rows that failed to parse)
    la,lb=st.median(A[k]["layer"]),st.median(B[k]["layer"]); ga,gb=st.median(A[k]["gemm"]),st.median(B[k]["gemm"])
    spread=max(A[k]["layer"])/min(A[k]["layer"])
    lr.append(lb/la); gr.append(gb/ga)
    print(f"{k[0]:14s} {k[1]:12s} {k[2]:8s} {k[3]:5d} layer {la:8.1f} {lb:8.1f} {lb/la:5.2f} (spreadA {spread:4.2f})  gemm {ga:8.1f} {gb:8.1f} {gb/ga:5.2f}")
import math
g=lambda x: math.exp(sum(map(math.log,x))/len(x))
print(f"geomean layer B/A {g(lr):.3f}  gemm B/A {g(gr):.3f}  rows {len(lr)}  min {min(lr):.2f} max {max(lr):.2f}")
