import csv,sys,collections
rows=list(csv.reader(open(sys.argv[1])))
kernels=[]; cur=None
for r in rows:
    if r and r[0]=='Kernel Name': cur={'name':r[1],'rows':[]}; kernels.append(cur); hdr=None; continue
    if r and r[0]=='Address': cur['hdr']=r; continue
    if cur and 'hdr' in cur and len(r)==len(cur['hdr']): cur['rows'].append(r)
for k in kernels:
    h=k['hdr']; ix={n:i for i,n in enumerate(h)}
    print('=====',k['name'][:110], len(k['rows']))
    stall=[n for n in h if n.startswith('stall_') and 'Not Issued' not in n]
    tot=collections.Counter()
    samp=lambda r: float(r[ix['Warp Stall Sampling (All Samples)']] or 0)
    T=sum(samp(r) for r in k['rows'])
    for r in k['rows']:
        for n in stall: tot[n]+=float(r[ix[n]] or 0)
    print('total samples',T, ' '.join(f"{n[6:]}={v/T:.2f}" for n,v in tot.most_common(8)))
    top=sorted(k['rows'],key=samp,reverse=True)[:int(sys.argv[2]) if len(sys.argv)>2 else 25]
    for r in top:
        s=samp(r); reasons=sorted(((float(r[ix[n]] or 0),n[6:]) for n in stall),reverse=True)[:2]
        print(f"{s/T:6.3f} {r[0]:>6} {r[1][:70]:70s} {reasons}")
