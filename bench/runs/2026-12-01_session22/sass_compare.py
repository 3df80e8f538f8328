import re, sys
def load(p):
    txt=open(p).read()
    out={}
    for f in re.split(r'\n\s*Function : ',txt)[1:]:
        name=f.split('\n',1)[0].strip()
        if 'fp4_grouped' not in name: continue
        ins=[re.sub(r'/\*[0-9a-fx]+\*/','',l).strip() for l in f.split('\n') if re.search(r'/\*[0-9a-f]{4,5}\*/\s+\S',l)]
        ins=[re.sub(r'\s+',' ',i) for i in ins if i]
        out[name]=ins
    return out
a=load(sys.argv[1]); b=load(sys.argv[2])
for n in a:
    tile='256' if 'ILi256' in n else '128'
    fmt=re.search(r'(Mxfp4Scales|Nvfp4Scales|Int4Scales\w*?)E',n); fmt=fmt.group(1) if fmt else '?'
    fused=n.split('ELb')[1][0] if 'ELb' in n else '?'
    print(tile, fmt[:14], 'fused' if fused=='1' else 'plain', len(a[n]), len(b.get(n,[])), 'same' if a[n]==b.get(n) else 'DIFF')
