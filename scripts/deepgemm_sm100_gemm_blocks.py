"""The blocks DeepGEMM's SM100 FP8 GEMM picks for a shape, and the stages its pipeline keeps: a port of the
heuristic's arithmetic for the table in docs/deepseek-kernels.md ("The rest of the decode step").

Source: github.com/deepseek-ai/DeepGEMM @ 54e22612409371d6364144b69086735beb54e98b,
csrc/jit_kernels/heuristics/sm100.hpp: get_layout_candidates (lines 27-148: swap-AB block_m 16..256 x block_n 128,
or block_m 32/64/128 by m x block_n 16, 32..256; 2-CTA clusters where the blocks pair up; TMEM <= 512 columns),
get_pipeline_config (lines 176-217: stages = (232448 - C/D - barriers - TMEM pointer) / stage bytes, at most 32),
get_launch_config (line 221: num_sms CTAs, a persistent grid), get_layout_info and compare (lines 228-266: one wave
first, then the larger cluster, fewer waves, the fuller last wave, the smaller block).

Usage: python scripts/deepgemm_sm100_gemm_blocks.py SMS ROWS   (GB300: 160 SMs; a DEP32 decode step: 96 rows)
"""
CAP=232448
def cdiv(a,b): return -(-a//b)
def align(a,b): return cdiv(a,b)*b
def best(m,n,k,sms):
    bk=128
    cands=[]
    for swap in (0,1):
        if swap: bms=list(range(16,257,16)); bns=[128]
        else:
            bms=[32] if m<=32 else [64] if m<=64 else [128]
            bns=[16]+list(range(32,(128 if k<=256 else 256)+1,32))
        for cm in (1,2):
            if swap and cm>1: continue
            for cn in (1,2):
                if cm*cn>2: continue
                if not swap and cn>1: continue
                if sms%(cm*cn): continue
                for bm in bms:
                    if (bm//cn)%8: continue
                    if cdiv(m,bm)%cm: continue
                    for bn in bns:
                        if (bn//cm)%8: continue
                        if cdiv(n,bn)%cn: continue
                        if swap and bn!=128: continue
                        sfm,sfn=align(bm,128),align(bn,128)
                        umma_n=bm if swap else bn
                        if 2*umma_n+sfm//32+sfn//32>512: continue
                        cands.append((swap,bm,bn,cm,cn))
    def info(c):
        swap,bm,bn,cm,cn=c
        nb=cdiv(m,bm)*cdiv(n,bn)
        w=cdiv(nb,sms); last=nb%sms or sms
        return w,last,nb
    def better(a,b):
        (wa,la,_),(wb,lb,_)=info(a),info(b)
        if (wa==1 or wb==1) and wa!=wb: return wa<wb
        ca,cb=a[3]*a[4],b[3]*b[4]
        if ca!=cb: return ca>cb
        if wa!=wb: return wa<wb
        if la!=lb: return la>lb
        if a[1]+a[2]!=b[1]+b[2]: return a[1]+a[2]<b[1]+b[2]
        return a[1]*a[2]<b[1]*b[2]
    b=cands[0]
    for c in cands[1:]:
        if better(c,b): b=c
    swap,bm,bn,cm,cn=b
    lbm,lbn=bm//cn,bn//cm
    sfa,sfb=align(bm,128)*4,align(bn,128)*4
    stage=lbm*bk+lbn*bk+sfa+sfb
    cd=16*bn*2*2 if swap else min(128,bm)*128*2  # C/D: swap-AB 16 x block_n BF16 x 2; else block_m x 128 B swizzle x 2
    extra=cd+32*8*3+2*8*2+8+4
    stages=min((CAP-extra)//stage,32)
    w,last,nb=info(b)
    return dict(swap=swap,bm=bm,bn=bn,cluster=cm*cn,blocks=nb,waves=w,stages=stages,stage=stage,
                wbytes_stage=(bn if swap else bn)*bk, nblk=cdiv(n,bn), mblk=cdiv(m,bm))
if __name__=="__main__":
    import sys
    sms=int(sys.argv[1]); m=int(sys.argv[2])
    for name,n,k in [("wq_a",1280,5120),("wq_b",32768,1280),("wkv",512,5120),("kv_compress",1024,5120),("wo_a g8",1024,4096),("wo_b",5120,8192),
                     ("idx wq_b",4096,1280),("idx wk",128,5120),("idx w",32,5120),("router",384,5120),("shared up",4608,5120),("shared down",5120,2304),
                     ("lm head",129280,5120),("draft fuse",5120,10240),("draft router",128,5120),("engram",5120,2048)]:
        print(f"{name:12} n={n:6} k={k:5}", best(m,n,k,sms))
