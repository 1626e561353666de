"""Launch settings: a deterministic function of the copy's shape; autotuning only when asked, on a GPU."""
import pytest

from hicache.kernels import launch
from hicache.kernels.launch import LaunchConfig, copy_config


@pytest.mark.parametrize("chunk,word,expected", [
    (1, 8, LaunchConfig(block=1, num_warps=1)),            # one 8-byte word: the smallest tile
    (15 * 16, 2, LaunchConfig(block=256, num_warps=2)),     # 480 bytes: a 512-byte tile, two warps
    (1024, 8, LaunchConfig(block=1024, num_warps=8)),      # 8 KiB chunk in one tile
    (8192, 8, LaunchConfig(block=2048, num_warps=8)),      # 64 KiB chunk: four 16 KiB tiles
    (8192, 1, LaunchConfig(block=8192, num_warps=8)),      # fp8 as bytes: one 8 KiB tile
])
def test_copy_config_is_a_pure_function_of_the_shape(chunk, word, expected):
    assert copy_config(chunk, word) == expected
    cfg = copy_config(chunk, word)
    assert cfg.block & (cfg.block - 1) == 0 and cfg.block * word <= launch.TILE_BYTES


def test_autotune_is_opt_in_and_gpu_only(monkeypatch):
    default = LaunchConfig(block=64, num_warps=2)
    calls = []
    monkeypatch.delenv("HICACHE_KERNEL_AUTOTUNE", raising=False)
    assert launch.tuned(("k",), default, calls.append, "cuda") is default
    monkeypatch.setenv("HICACHE_KERNEL_AUTOTUNE", "1")
    assert launch.tuned(("k",), default, calls.append, "cpu") is default
    assert calls == []
