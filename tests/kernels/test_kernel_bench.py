"""`hicache bench kernels` reports every comparison as a ratio beside its two figures."""
import argparse

import pytest

from hicache import kernels
from hicache.bench import kernels as bench


def test_bench_reports_ratios_of_measured_figures(monkeypatch):
    monkeypatch.setitem(bench.MOVED_BYTES, "cpu", {True: 1 << 20, False: 1 << 20})
    result = bench.run(argparse.Namespace(quick=True, runs=1, json=True))
    assert result["device"] == "cpu"
    assert result["backend"] == result["cpu_path"] == kernels.backend("cpu").value
    assert result["cpu_path"] in ("native", "torch")
    assert result["target_ratio"] == bench.CPU_TARGET
    names = {(c["name"], c["page_size"]) for c in result["comparisons"]}
    for ps, _, _ in bench.PAGE_SHAPES:
        assert {("gather", ps), ("scatter", ps), ("backup_all_layers[page_first]", ps),
                ("load_all_layers[page_first_direct]", ps), ("load_one_layer[layer_first]", ps)} <= names
    for c in result["comparisons"]:
        assert c["kernel_gbps"] > 0 and c["baseline_gbps"] > 0
        assert c["ratio"] == pytest.approx(c["kernel_gbps"] / c["baseline_gbps"], rel=2e-2, abs=2e-3)
        assert c["meets_target"] == (c["ratio"] >= bench.CPU_TARGET) or abs(c["ratio"] - bench.CPU_TARGET) < 1e-3
    assert {c["page_bytes"] for c in result["comparisons"]} == {16 * 1024, 64 * 1024}
    assert "cpu" in result["machine"] and result["machine"]["torch_threads"] >= 1


def test_gpu_selfcheck_logic_passes_through_the_interpreter():
    """The checks `bench kernels` runs on a GPU, run here on CPU tensors via TRITON_INTERPRET."""
    pytest.importorskip("triton", reason="triton is not installed")
    import torch

    from hicache import kernels

    checks = bench.gpu_selfcheck(torch, kernels, device="cpu")
    assert len(checks) == 10 and all(checks.values()), checks
