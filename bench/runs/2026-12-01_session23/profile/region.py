import csv,sys
rows=list(csv.reader(open(sys.argv[1])))
which=int(sys.argv[2]); lo=int(sys.argv[3],16); hi=int(sys.argv[4],16)
k=-1; hdr=None
for r in rows:
    if r and r[0]=='Kernel Name': k+=1; continue
    if r and r[0]=='Address': hdr={n:i for i,n in enumerate(r)}; continue
    if k==which and hdr and len(r)>5:
        a=int(r[0],16)
        if lo<=a<=hi:
            st=sorted(((float(r[hdr[n]] or 0),n[6:]) for n in hdr if n.startswith('stall_') and 'Not' not in n),reverse=True)[:2]
            print(f"{r[0][-5:]} {r[hdr['Warp Stall Sampling (All Samples)']]:>6} {r[hdr['Instructions Executed']]:>9} {r[1][:80]:80s} {st[0] if st[0][0]>0 else ''}")
