#!/usr/bin/env python3
# GEMM µs per path (decode kernels, the register kernel's 32- / 64- / 128-row tiles forced) of a
# set of `qmoe bench` text logs (medians over rounds), the automatic path's, and another set's
# automatic path, with the best forced path over the automatic one:
#   python3 paths.py DIR "GLOB_NEW" "GLOB_OLD"
import glob,statistics as st,collections,sys
d=sys.argv[1]
def load(pat):
    rows=collections.defaultdict(list)
    for f in glob.glob(d+"/"+pat):
        for line in open(f):
            p=line.split()
            if len(p)>=6 and p[3].isdigit():
                try: rows[(p[0],p[1],p[2],int(p[3]))].append(float(p[5]))
                except: pass
    return {k:st.median(v) for k,v in rows.items() if v}
N=load(sys.argv[2]); M=load(sys.argv[3])
E={'mixtral-8x7b':(2,8),'qwen3-30b-a3b':(8,128),'deepseek-v3':(8,256),'gpt-oss-120b':(4,128)}
keys=sorted(set((k[0],k[1],k[3]) for k in N))
nan=float('nan')
print(f"{'model':14s} {'scheme':11s} {'tok':>5s} {'rows':>4s} | {'dec':>7s} {'t32':>7s} {'t64':>7s} {'t128':>7s} | {'auto_new':>8s} {'auto_old':>8s} best")
for m,s,t in keys:
    g=lambda p: N.get((m,s,p,t),nan)
    v={"dec":g("decode"),"t32":g("prefill:4"),"t64":g("prefill:5"),"t128":g("prefill:2")}
    vv={k:x for k,x in v.items() if x==x}
    if not vv: continue  # (a row measured on the automatic path only)
    best=min(vv,key=lambda x:vv[x])
    print(f"{m:14s} {s:11s} {t:5d} {t*E[m][0]/E[m][1]:4.0f} | {v['dec']:7.1f} {v['t32']:7.1f} {v['t64']:7.1f} {v['t128']:7.1f} | {g('auto'):8.1f} {M.get((m,s,'auto',t),nan):8.1f} {best:4s} {vv[best]/g('auto'):.2f}")
