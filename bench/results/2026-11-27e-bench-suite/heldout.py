import json, subprocess, os, sys
NEW='/work/main/build'; OLD='/tmp/oldwt/build'  # the previous build (a43d0a7) in a git worktree
S=["--layers","8","--hidden","1024","--heads","16","--seq","1024","--micro-batches","8"]
M=["--layers","24","--hidden","2048","--heads","16","--seq","2048","--micro-batches","8","--tp","2","--sequence-parallel"]
def moe(extra, e=8, k=2, imb="4", st="4"):
    return S+["--stages",st,"--experts",str(e),"--top-k",str(k),"--imbalance",imb]+extra
IL=["--schedule","interleaved","--virtual-stages","2"]
cases=[
 ("top1-imb2-p5s11", moe([],k=1,imb="2"),5,11),
 ("top1-imb4-p4s8", moe([],k=1),4,8),
 ("top1-imb1-p2s3", moe([],k=1,imb="1"),2,3),
 ("il2-imb2-p3s9", moe(IL,imb="2"),3,9),
 ("il2-imb4-p5s6", moe(IL),5,6),
 ("e16-imb3-p7s12", moe([],e=16,imb="3"),7,12),
 ("sel-imb4-p2s5", moe(["--recompute","selective"]),2,5),
 ("pp2-imb4-p6s13", moe([],st="2"),6,13),
 ("imb6-p8s9", moe([],imb="6"),8,9),
 ("top4-imb2-p3s4", moe([],k=4,imb="2"),3,4),
 ("dense-s-il2-mb12-pp2", S[:-1]+["12","--stages","2"]+IL,None,None),
 ("dense-s-1f1b-full-pp2", S+["--stages","2","--recompute","full"],None,None),
 ("moe-m-imb2-p3s4", M+["--stages","4","--experts","8","--top-k","2","--imbalance","2"],3,4),
]
tmp='/tmp/ho'; os.makedirs(tmp,exist_ok=True)
def run(c): 
    r=subprocess.run(c,capture_output=True,text=True); return r
def rep(b,pol,trace,plan=None):
    c=[b+'/stalloc-replay','--json','--policy',pol]+(['--plan',plan] if plan else [])+[trace]
    d=json.loads(run(c).stdout); return d['peak_reserved_bytes']>>20, d['plan_misses'], d.get('plan_rejected',False)
only=sys.argv[1:]
for name,opts,ps,rs in cases:
    if only and not any(o in name for o in only): continue
    rt=f'{tmp}/{name}.trace'; pt=f'{tmp}/{name}.ptrace'
    run([NEW+'/stalloc-synth','-o',rt]+opts+(['--seed',str(rs)] if rs else []))
    if ps: run([NEW+'/stalloc-synth','-o',pt]+opts+['--seed',str(ps)])
    else: pt=rt
    run([NEW+'/stalloc-plan','-o',f'{tmp}/{name}.new.plan',pt])
    run([OLD+'/stalloc-plan','-o',f'{tmp}/{name}.old.plan',pt])
    n=rep(NEW,'stalloc',rt,f'{tmp}/{name}.new.plan'); o=rep(OLD,'stalloc',rt,f'{tmp}/{name}.old.plan')
    on={p:rep(NEW,p,rt)[0] for p in ('off','caching','expandable')}
    best=min(on.values())
    print('%-24s old %6d (m%4d) new %6d (m%4d%s)  off %6d cach %6d exp %6d  old-loss %s new-loss %s' % (name,o[0],o[1],n[0],n[1],' REJ' if n[2] else '',on['off'],on['caching'],on['expandable'], o[0]>best+2, n[0]>best+2), flush=True)
