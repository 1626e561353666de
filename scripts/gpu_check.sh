#!/usr/bin/env bash
# GPU figures for issue 7 on a machine with CUDA, torch and Triton but without hicache's
# other dependencies (no network): import the checkout through a staging folder that maps
# kernels/ to hicache.kernels (as pyproject's package-dir does), then run
#   1. the Triton-vs-torch self-check of every kernel on the GPU,
#   2. `hicache bench kernels` (default launch settings),
#   3. the same with HICACHE_KERNEL_AUTOTUNE=1,
#   4. a sweep of launch settings for one transfer and one gather (what the defaults could be).
# Usage: OUT=/some/dir bash scripts/gpu_check.sh   (JSON files land in $OUT)
set -u
OUT=${OUT:-/tmp/hicache-gpu}
mkdir -p "$OUT"
stage=$(mktemp -d)
cp -r hicache "$stage/hicache"
rm -rf "$stage/hicache/kernels"
cp -r kernels "$stage/hicache/kernels"
export PYTHONPATH="$stage" PYTHONUNBUFFERED=1 OUT
# run from the staging folder: python puts the working directory first on sys.path
cd "$stage"
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv || true
python3 /dev/stdin < "$OLDPWD/scripts/gpu_probe.py"
python3 - <<'PY'
import json, os, torch, triton
print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())
from argparse import Namespace
from hicache.bench import kernels as bk
from hicache import kernels as k
out = os.environ["OUT"]
checks = bk.gpu_selfcheck(torch, k)
print("selfcheck", checks)
res = bk.run(Namespace(quick=False, runs=3, json=True))
json.dump(res, open(f"{out}/bench_kernels.json", "w"), indent=1)
for c in res["comparisons"]:
    print(f'{c["name"]:34s} ps={c["page_size"]:3d} {c["kernel_gbps"]:9.1f} GB/s vs {c["baseline_gbps"]:9.1f} ratio {c["ratio"]:.3f}')
os.environ["HICACHE_KERNEL_AUTOTUNE"] = "1"
res = bk.run(Namespace(quick=False, runs=3, json=True))
json.dump(res, open(f"{out}/bench_kernels_autotune.json", "w"), indent=1)
print("autotuned:")
for c in res["comparisons"]:
    print(f'{c["name"]:34s} ps={c["page_size"]:3d} {c["kernel_gbps"]:9.1f} GB/s vs {c["baseline_gbps"]:9.1f} ratio {c["ratio"]:.3f}')
from hicache.kernels import launch
print("tuned configs:", {str(key): (v.block, v.num_warps) for key, v in launch._tuned.items()})
PY
python3 - <<'PY'
# launch-setting sweep: load_all_layers layer_first<-page_first and gather, 64 KiB pages
import json, os, torch
from triton.testing import do_bench
from hicache import kernels as k
from hicache.kernels import launch, transfer, page_gather
res = []
for ps in (16, 64):
    L, H, D, n = 4, 4, 128, 1024 if ps == 16 else 256
    pages = 2 * n
    dev = torch.randn(2, L, pages * ps, H, D, device="cuda", dtype=torch.float16)
    host = torch.randn(2, pages * ps, L, H, D, dtype=torch.float16).pin_memory()
    ids = torch.randperm(pages)[:n]; ids2 = torch.randperm(pages)[:n]
    nbytes = 2 * L * n * ps * H * D * 2
    for block in (256, 512, 1024, 2048, 4096):
        for warps in (2, 4, 8, 16):
            launch.copy_config = (lambda b, w: (lambda cw, wb: launch.LaunchConfig(block=min(b, launch.next_pow2(cw)), num_warps=w)))(block, warps)
            transfer.copy_config = launch.copy_config
            page_gather.copy_config = launch.copy_config
            t = do_bench(lambda: k.transfer_pages(host, dev, ids, ids2, page_size=ps, src_layout=k.Layout.PAGE_FIRST), warmup=5, rep=30)
            res.append({"op": "load_all_layers[page_first]", "ps": ps, "block": block, "warps": warps, "gbps": nbytes / t / 1e6})
    print(ps, sorted(res, key=lambda r: -r["gbps"])[:3])
json.dump(res, open(os.environ["OUT"] + "/sweep.json", "w"), indent=1)
PY
