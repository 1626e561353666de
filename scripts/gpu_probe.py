"""Where a GPU page gather's time goes (run by scripts/gpu_check.sh on a CUDA machine).

For 16 and 64 KiB pages: the host-side planning, the whole dispatch call, the raw kernel
launch for several tile sizes / warp counts, torch's own index_select and a D2D copy.
"""
import json
import os
import time

import torch
from triton.testing import do_bench

from hicache import kernels as k
from hicache.kernels import page_gather

out = []
for ps in (16, 64):
    H, D = 4, 128
    moved = 256 << 20
    page_bytes = ps * H * D * 2
    n = moved // page_bytes
    pool = torch.randn(2 * n * ps, H, D, device="cuda", dtype=torch.float16)
    scratch = torch.empty(n * ps, H, D, device="cuda", dtype=torch.float16)
    ids = torch.randperm(2 * n)[:n]
    ids_d = ids.cuda()
    a = torch.empty(moved, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    rec = {"ps": ps, "pages": n}
    t0 = time.perf_counter()
    for _ in range(20):
        page_gather._plan(pool, scratch, ids, ps, scatter=False)
    rec["plan_us"] = (time.perf_counter() - t0) / 20 * 1e6
    t0 = time.perf_counter()
    for _ in range(20):
        page_gather._plan(pool, scratch, ids, ps, scatter=True)
    rec["plan_scatter_us"] = (time.perf_counter() - t0) / 20 * 1e6
    rec["d2d_gbps"] = moved / do_bench(lambda: b.copy_(a)) / 1e6
    rec["gather_gbps"] = moved / do_bench(lambda: k.gather_pages(pool, ids, scratch, page_size=ps)) / 1e6
    rec["scatter_gbps"] = moved / do_bench(lambda: k.scatter_pages(scratch, pool, ids, page_size=ps)) / 1e6
    rec["index_select_gbps"] = moved / do_bench(
        lambda: torch.index_select(pool.view(2 * n, -1), 0, ids_d, out=scratch.view(n, -1))) / 1e6
    plan = page_gather._plan(pool, scratch, ids, ps, scatter=False)
    kern = page_gather._page_rows_kernel
    raw = {}
    for block in (512, 1024, 2048, 4096):
        for warps in (4, 8, 16):
            if block > plan.chunk * 2:
                continue
            f = lambda: kern[(n,)](plan.pool, plan.buf, ids_d, CHUNK=plan.chunk, BLOCK=block, GATHER=True,
                                   num_warps=warps)
            raw[f"{block}x{warps}"] = moved / do_bench(f) / 1e6
    rec["raw_kernel_gbps"] = raw
    out.append(rec)
    print(json.dumps(rec))
json.dump(out, open(os.environ["OUT"] + "/probe.json", "w"), indent=1)
