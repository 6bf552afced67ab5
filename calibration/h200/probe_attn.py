"""Probe: SDPA decode (q_len 1) on the H200 -- time per call in a CUDA graph, per backend, and the kernels each launches."""
import csv, json, os, sys, time
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

out = os.environ.get("OUT", "/tmp")
dev = "cuda"
H, HKV, D = 32, 8, 128
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}

def graph_time(fn, reps=50, samples=7):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay(); torch.cuda.synchronize()
    ts = []
    for _ in range(samples):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1e-3 / reps)
    ts.sort()
    return ts[len(ts) // 2]

rows = []
log = open(os.path.join(out, "probe_attn.log"), "w")
for batch in (1, 2, 4, 8, 16, 32, 64):
    for kv in (256, 1024, 4096, 8192, 16384, 32768):
        # several input sets so consecutive calls do not hit L2
        nsets = max(1, min(16, int(2e8 // (2 * batch * HKV * kv * D * 2))))
        sets = [(torch.randn(batch, H, 1, D, device=dev, dtype=torch.bfloat16),
                 torch.randn(batch, HKV, kv, D, device=dev, dtype=torch.bfloat16),
                 torch.randn(batch, HKV, kv, D, device=dev, dtype=torch.bfloat16)) for _ in range(nsets)]
        for name, be in BACKENDS.items():
            i = [0]
            def fn(be=be):
                q, k, v = sets[i[0] % nsets]; i[0] += 1
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            try:
                t = graph_time(fn)
            except Exception as exc:
                print(f"{name} b={batch} kv={kv}: {type(exc).__name__}: {str(exc)[:120]}", file=log, flush=True)
                continue
            nbytes = 2 * batch * HKV * kv * D * 2
            rows.append(dict(backend=name, batch=batch, heads=H, kv_heads=HKV, kv_len=kv, head_dim=D, seconds=t,
                             bytes=nbytes, tbps=nbytes / t / 1e12, sets=nsets))
            print(f"{name:6s} b={batch:3d} kv={kv:6d} {t*1e6:9.2f} us {nbytes/t/1e12:6.2f} TB/s", file=log, flush=True)
        del sets
with open(os.path.join(out, "probe_attn.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)

# kernels each backend launches (names, grids) for a few shapes
from torch.profiler import profile, ProfilerActivity
prof_out = []
for batch, kv in ((1, 1024), (1, 8192), (1, 32768), (8, 1024), (64, 32768)):
    q = torch.randn(batch, H, 1, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(batch, HKV, kv, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(batch, HKV, kv, D, device=dev, dtype=torch.bfloat16)
    for name, be in BACKENDS.items():
        try:
            with sdpa_kernel(be):
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True); torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA], record_shapes=False) as p:
                    F.scaled_dot_product_attention(q, k, v, enable_gqa=True); torch.cuda.synchronize()
        except Exception as exc:
            prof_out.append(dict(backend=name, batch=batch, kv=kv, error=str(exc)[:200])); continue
        trace = "/tmp/trace.json"
        p.export_chrome_trace(trace)
        ev = json.load(open(trace))
        ev = ev["traceEvents"] if isinstance(ev, dict) else ev
        ks = [dict(name=e.get("name", "")[:160], us=e.get("dur"), grid=e.get("args", {}).get("grid"),
                   block=e.get("args", {}).get("block"), regs=e.get("args", {}).get("registers per thread"),
                   smem=e.get("args", {}).get("shared memory"))
              for e in ev if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]
        prof_out.append(dict(backend=name, batch=batch, kv=kv, kernels=ks))
json.dump(prof_out, open(os.path.join(out, "probe_attn_kernels.json"), "w"), indent=1)
env = dict(torch=torch.__version__, cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
           gpu=torch.cuda.get_device_name(), date_utc=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()))
json.dump(env, open(os.path.join(out, "probe_attn.env.json"), "w"), indent=1)
print("done", file=log, flush=True)
