"""The dispatch layer: one backend per device type, chosen once; every call goes through it."""
import pytest
import torch

from hicache import kernels
from hicache.kernels import dispatch, native
from hicache.kernels.dispatch import Backend


@pytest.fixture
def fresh_choice(monkeypatch):
    saved = dict(dispatch._chosen)
    dispatch._chosen.clear()
    yield monkeypatch
    dispatch._chosen.clear()
    dispatch._chosen.update(saved)


def test_cpu_gets_the_native_copy_and_keeps_it(fresh_choice):
    """Native where the C library builds (it does wherever a C compiler is), else torch."""
    fresh_choice.delenv(dispatch.ENV, raising=False)
    expected = Backend.NATIVE if native.library() is not None else Backend.TORCH
    assert kernels.backend("cpu") is expected
    fresh_choice.setenv(dispatch.ENV, "torch")        # chosen once: a later change is not seen
    assert kernels.backend("cpu") is expected


def test_cuda_gets_triton_when_it_imports(fresh_choice):
    fresh_choice.delenv(dispatch.ENV, raising=False)
    expected = Backend.TRITON if dispatch._triton.HAVE_TRITON else Backend.TORCH
    assert kernels.backend("cuda") is expected


def test_environment_override_and_its_validation(fresh_choice):
    fresh_choice.setenv(dispatch.ENV, "torch")
    assert kernels.backend("cuda") is Backend.TORCH
    dispatch._chosen.clear()
    fresh_choice.setenv(dispatch.ENV, "cuda-graphs")
    with pytest.raises(ValueError, match=dispatch.ENV):
        kernels.backend("cpu")


def test_calls_route_to_the_chosen_backend(fresh_choice):
    calls = []
    spy = dispatch.KernelSet(*(lambda *a, _n=name, **k: calls.append(_n)
                               for name in ("gather", "scatter", "transfer", "packed", "attention")))
    fresh_choice.setitem(dispatch.KERNELS, Backend.TORCH, spy)
    kernels.set_backend("torch", "cpu")
    t = torch.zeros(1)
    kernels.gather_pages(t, t, t, page_size=1)
    kernels.scatter_pages(t, t, t, page_size=1)
    kernels.transfer_pages(t, t, t, t, page_size=1)
    kernels.transfer_packed(t, t, t, t, t, direction="to_host", page_size=1)
    kernels.paged_attention(t, t, t, t, t, t, page_size=1)
    assert calls == ["gather", "scatter", "transfer", "packed", "attention"]


def test_public_api_moves_pages_on_cpu():
    pool = torch.arange(2 * 1 * 8 * 2 * 3, dtype=torch.float32).reshape(2, 1, 8, 2, 3)
    host = torch.zeros(2, 8, 1, 2, 3)
    kernels.transfer_pages(pool, host, torch.tensor([3, 1]), torch.tensor([0, 2]), page_size=2,
                           dst_layout=kernels.Layout.PAGE_FIRST)
    assert torch.equal(host[:, 0:2, 0], pool[:, 0, 6:8]) and torch.equal(host[:, 4:6, 0], pool[:, 0, 2:4])
    assert torch.count_nonzero(host[:, 2:4]) == 0 and torch.count_nonzero(host[:, 6:8]) == 0
    out = kernels.gather_pages(pool[0, 0], torch.tensor([3]), torch.empty(2, 2, 3), page_size=2)
    assert torch.equal(out, pool[0, 0, 6:8])


def test_without_triton_the_fallback_serves_and_kernels_refuse_clearly():
    """Where Triton is not installed, hicache.kernels still imports and copies with torch."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import sys
        sys.modules["triton"] = None           # any `import triton` now raises ImportError
        import torch
        from hicache import kernels
        from hicache.kernels import _triton, page_gather
        assert not _triton.HAVE_TRITON
        assert kernels.backend("cuda") is kernels.Backend.TORCH
        pool = torch.arange(24.0).reshape(8, 1, 3)
        out = kernels.gather_pages(pool, torch.tensor([3, 0]), torch.empty(4, 1, 3), page_size=2)
        assert torch.equal(out, torch.cat([pool[6:8], pool[0:2]]))
        try:
            page_gather.gather_pages_triton(pool, torch.tensor([0]), torch.empty(2, 1, 3), page_size=2)
        except _triton.TritonUnavailable as exc:
            print("refused:", exc)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "refused:" in proc.stdout and "triton is not importable" in proc.stdout


@pytest.mark.parametrize("as_int", [int, lambda v: __import__("numpy").int64(v), torch.tensor], ids=["int", "numpy", "0-d"])
def test_sizes_and_layers_are_ints_on_every_backend(as_int):
    """A numpy or 0-d tensor page_size / layer worked on torch's path and broke the native
    library's ctypes calls (TypeError '1', ArgumentError) and Triton's launch."""
    pool = torch.zeros(32, 2, 8, dtype=torch.float16)
    src = torch.arange(8 * 2 * 8, dtype=torch.float16).view(8, 2, 8)
    ids = torch.tensor([1, 5])
    kernels.scatter_pages(src, pool, ids, page_size=as_int(4))
    assert torch.equal(pool[4:8], src[:4]) and torch.equal(pool[20:24], src[4:])
    dev, host = torch.randn(2, 3, 32, 2, 8), torch.zeros(2, 3, 32, 2, 8)
    kernels.transfer_pages(dev, host, ids, ids, page_size=as_int(4), layer=as_int(1))
    assert torch.equal(host[:, 1, 4:8], dev[:, 1, 4:8]) and not host[:, 0].any()


@pytest.mark.parametrize("bad", [4.0, True, "4", torch.tensor(4.0)], ids=str)
def test_a_page_size_that_is_no_integer_is_named(bad):
    with pytest.raises(ValueError, match="page_size: must be an integer"):
        kernels.gather_pages(torch.zeros(32, 2, 8), torch.tensor([1]), page_size=bad)


def test_a_sidecar_transfer_needs_lists_of_one_length():
    """A trailing-pages sidecar took the last pages of each list and paired pages from other
    positions of the sequence."""
    spec = kernels.SidecarSpec(name="state", hit_policy="trailing_pages", trailing=2)
    dst = torch.zeros(1, 1, 32, 1, 4)
    with pytest.raises(ValueError, match="dst_source_pages: 3 pages for 5 src_source_pages"):
        kernels.transfer_sidecar(spec, torch.randn(1, 1, 32, 1, 4), dst, torch.tensor([0, 1, 2, 3, 4]),
                                 torch.tensor([5, 6, 7]), page_size=4)
    assert not dst.any()
