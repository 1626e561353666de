"""The native CPU page copy (kernels/csrc/pagecopy.c via ctypes) against the torch reference.

The torch implementations stay the oracle: every native copy here must leave the destination
bit-identical to what the torch reference leaves, for every layout pair, per layer and all
layers, MHA and MLA, page sizes 1/16/64, odd heads and dims, fp32/fp16/bf16/fp8, unsorted page
lists (source lists with repeats). The build, the cache and the fallback are tested on a
private cache directory.
"""
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from hicache import kernels
from hicache.kernels import dispatch, native, packed, page_gather, transfer
from hicache.kernels.dispatch import Backend
from hicache.kernels.layout import Layout
from hicache.kernels.packed import SidecarSpec
from kernel_testlib import COPY_DTYPES, host_shape, random_bits, random_pages, same_bits


@pytest.fixture
def lib():
    if native.library() is None:
        pytest.skip(f"native page copy unavailable: {native.unavailable_reason()}")
    return native.library()


def _pool(layout, c, nl, pages, ps, h, d, dtype, gen):
    return random_bits(host_shape(layout, c, nl, pages, ps, h, d), dtype, gen)


def _both(run, dst, *args, **kwargs):
    """Run ``run[native]`` and ``run[torch]`` on copies of ``dst``; return both results."""
    got, want = dst.clone(), dst.clone()
    run["native"](*args[:1], got, *args[1:], **kwargs)
    run["torch"](*args[:1], want, *args[1:], **kwargs)
    return got, want


TRANSFER = {"native": transfer.transfer_pages_native, "torch": transfer.transfer_pages_torch}

# (C, L, H, D, page_size, src pages, dst pages, pages moved): MHA with odd heads/dims, MLA
# (C=1, H=1), one page, page sizes 1/16/64.
GEOMETRIES = [
    pytest.param((2, 3, 3, 5, 16, 6, 7, 4), id="mha-ps16"),
    pytest.param((1, 2, 1, 9, 1, 9, 11, 6), id="mla-ps1"),
    pytest.param((2, 2, 1, 6, 64, 2, 3, 1), id="mha-ps64-1page"),
    pytest.param((2, 3, 5, 3, 64, 3, 4, 2), id="mha-ps64"),
]


@pytest.mark.parametrize("dtype", COPY_DTYPES, ids=str)
@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("layer", [None, 1], ids=["all-layers", "layer1"])
@pytest.mark.parametrize("dst_layout", list(Layout), ids=str)
@pytest.mark.parametrize("src_layout", list(Layout), ids=str)
def test_transfer_equals_the_torch_reference(lib, gen, src_layout, dst_layout, layer, geometry, dtype):
    c, nl, h, d, ps, src_pages, dst_pages, n = geometry
    src = _pool(src_layout, c, nl, src_pages, ps, h, d, dtype, gen)
    dst = _pool(dst_layout, c, nl, dst_pages, ps, h, d, dtype, gen)
    src_ids = torch.randint(0, src_pages, (n,), generator=gen)          # unsorted, may repeat
    dst_ids = random_pages(n, dst_pages, gen)                           # unsorted, duplicate-free
    got, want = _both(TRANSFER, dst, src, src_ids, dst_ids, page_size=ps, src_layout=src_layout,
                      dst_layout=dst_layout, layer=layer)
    assert same_bits(got, want)
    assert not same_bits(got, dst)          # something moved (random bits never coincide)


def test_copy_within_one_pool_equals_the_torch_reference(lib, gen):
    pool = _pool(Layout.PAGE_FIRST, 2, 3, 8, 4, 3, 5, torch.float16, gen)
    want = pool.clone()
    src_ids, dst_ids = torch.tensor([6, 1, 3]), torch.tensor([0, 7, 2])
    transfer.transfer_pages_torch(want, want, src_ids, dst_ids, page_size=4, src_layout="page_first",
                                  dst_layout="page_first")
    transfer.transfer_pages_native(pool, pool, src_ids, dst_ids, page_size=4, src_layout="page_first",
                                   dst_layout="page_first")
    assert same_bits(pool, want)


@pytest.mark.parametrize("dtype", COPY_DTYPES, ids=str)
@pytest.mark.parametrize("ps,pages,n,row", [(1, 9, 5, (3, 5)), (16, 7, 7, (5, 3)), (64, 3, 1, (1, 18))])
def test_gather_and_scatter_equal_the_torch_reference(lib, gen, dtype, ps, pages, n, row):
    pool = random_bits((pages * ps, *row), dtype, gen)
    ids = torch.randint(0, pages, (n,), generator=gen)                 # gather: repeats allowed
    got = page_gather.gather_pages_native(pool, ids, random_bits((n * ps, *row), dtype, gen), page_size=ps)
    assert same_bits(got, page_gather.gather_pages_torch(pool, ids, page_size=ps))
    src = random_bits((n * ps, *row), dtype, gen)
    dst_ids = random_pages(n, pages, gen)
    got_pool, want_pool = pool.clone(), pool.clone()
    page_gather.scatter_pages_native(src, got_pool, dst_ids, page_size=ps)
    page_gather.scatter_pages_torch(src, want_pool, dst_ids, page_size=ps)
    assert same_bits(got_pool, want_pool)


@pytest.mark.parametrize("host_layout", list(Layout), ids=str)
@pytest.mark.parametrize("direction", ["to_host", "to_device"])
@pytest.mark.parametrize("layer", [None, 0, 2], ids=["all-layers", "layer0", "last-layer"])
def test_packed_equals_the_torch_reference(lib, gen, host_layout, direction, layer):
    c, lt, ld, h, d, ps, pages = 2, 3, 2, 3, 5, 4, 6
    target = random_bits((c, lt, pages * ps, h, d), torch.bfloat16, gen)
    draft = random_bits((c, ld, pages * ps, h, d), torch.bfloat16, gen)
    host = _pool(host_layout, c, lt + ld, pages, ps, h, d, torch.bfloat16, gen)
    dev_ids, host_ids = random_pages(4, pages, gen), random_pages(4, pages, gen)
    results = {}
    for impl, run in (("native", packed.transfer_packed_native), ("torch", packed.transfer_packed_torch)):
        t, dr, ho = target.clone(), draft.clone(), host.clone()
        run(t, dr, ho, dev_ids, host_ids, direction=direction, page_size=ps, host_layout=host_layout, layer=layer)
        results[impl] = (t, dr, ho)
    assert all(same_bits(a, b) for a, b in zip(results["native"], results["torch"]))


def test_sidecar_through_the_native_backend_equals_torch(lib, gen):
    ps = 4
    device = random_bits((1, 2, 6 * ps, 1, 12), torch.float8_e4m3fn, gen)
    host = random_bits((1, 5 * ps, 2, 1, 12), torch.float8_e4m3fn, gen)
    spec = SidecarSpec(name="swa_state", hit_policy="trailing_pages", trailing=2)
    dev_map = torch.tensor([3, 5, 0, 1, 2, 4, -1, -1])
    src_pages, dst_pages = torch.tensor([0, 4, 1, 2]), torch.tensor([2, 0, 4, 3])
    out = {}
    try:
        for impl in ("native", "torch"):
            dispatch.set_backend(impl)
            h = host.clone()
            ids = kernels.transfer_sidecar(spec, device, h, src_pages, dst_pages, page_size=ps, src_map=dev_map,
                                           dst_layout="page_first")
            out[impl] = (ids, h)
    finally:
        dispatch.set_backend(None)
    assert out["native"][0].tolist() == out["torch"][0].tolist() == [4, 3]
    assert same_bits(out["native"][1], out["torch"][1])


def test_a_page_list_split_across_threads_copies_the_same_bytes(lib, gen, monkeypatch):
    """The C side splits the page list into per-thread ranges; 3 threads over 7 pages."""
    monkeypatch.setattr(native, "threads_for", lambda nbytes: 3)
    c, nl, h, d, ps, pages = 2, 3, 3, 5, 16, 9
    src = _pool(Layout.LAYER_FIRST, c, nl, pages, ps, h, d, torch.float16, gen)
    for dst_layout in Layout:
        dst = _pool(dst_layout, c, nl, pages, ps, h, d, torch.float16, gen)
        src_ids, dst_ids = random_pages(7, pages, gen), random_pages(7, pages, gen)
        got, want = _both(TRANSFER, dst, src, src_ids, dst_ids, page_size=ps, dst_layout=dst_layout)
        assert same_bits(got, want)
    pool = random_bits((pages * ps, h, d), torch.float16, gen)
    ids = random_pages(7, pages, gen)
    got = page_gather.gather_pages_native(pool, ids, page_size=ps)
    assert same_bits(got, page_gather.gather_pages_torch(pool, ids, page_size=ps))


def test_bad_input_raises_before_the_native_copy(lib, gen, monkeypatch):
    calls = []
    monkeypatch.setattr(native, "copy_pages", lambda *a, **k: calls.append(a))
    src = random_bits((2, 2, 8, 1, 4), torch.float16, gen)
    dst = torch.zeros(2, 2, 8, 1, 4, dtype=torch.float16)
    with pytest.raises(ValueError, match="duplicate"):
        transfer.transfer_pages_native(src, dst, torch.tensor([0, 1]), torch.tensor([3, 3]), page_size=2)
    with pytest.raises(ValueError, match="out of range"):
        transfer.transfer_pages_native(src, dst, torch.tensor([4]), torch.tensor([0]), page_size=2)
    with pytest.raises(ValueError, match="dtypes differ"):
        transfer.transfer_pages_native(src, dst.float(), torch.tensor([0]), torch.tensor([0]), page_size=2)
    with pytest.raises(ValueError, match="contiguous"):
        page_gather.gather_pages_native(torch.zeros(4, 8, 3).transpose(0, 1), torch.tensor([0]), page_size=4)
    assert calls == [] and torch.count_nonzero(dst) == 0


# ------------------------------------------------------------------------------- loop nests


def _nest(src_layout, dst_layout, *, c=2, nl=3, pages=4, ps=16, h=3, d=5, layer=None):
    src = torch.zeros(host_shape(Layout(src_layout), c, nl, pages, ps, h, d), dtype=torch.float16)
    dst = torch.zeros(host_shape(Layout(dst_layout), c, nl, pages, ps, h, d), dtype=torch.float16)
    plan = transfer.plan_transfer(src, dst, torch.tensor([0]), torch.tensor([1]), page_size=ps,
                                  src_layout=src_layout, dst_layout=dst_layout, layer=layer)
    return transfer.segment_nest(plan.segments[0])[2]


def test_loop_nests_copy_whole_chunks_and_walk_the_page_major_side_in_order():
    row = 3 * 5 * 2                     # bytes of one token row (H=3, D=5, fp16)
    slots, chunk, nl = 4 * 16, 16 * row, 3
    lf = _nest("layer_first", "layer_first")
    assert lf == native.LoopNest((native.Dim(2, nl * slots * row, nl * slots * row),
                                  native.Dim(nl, slots * row, slots * row)), chunk, 2, False)
    to_pf = _nest("layer_first", "page_first")          # destination leads: a page's rows in order
    assert to_pf == native.LoopNest((native.Dim(2, nl * slots * row, slots * nl * row),
                                     native.Dim(16, row, nl * row), native.Dim(nl, slots * row, row)), row, 1, False)
    from_pf = _nest("page_first", "layer_first")        # source leads, the same walk of the host page
    assert from_pf == native.LoopNest((native.Dim(2, slots * nl * row, nl * slots * row),
                                       native.Dim(16, nl * row, row), native.Dim(nl, row, slots * row)), row, 1, True)
    direct = _nest("page_first_direct", "page_first_direct")   # a whole page, all layers: one run
    assert direct == native.LoopNest((native.Dim(2, 4 * nl * chunk, 4 * nl * chunk),), nl * chunk, 1, False)
    mla_layer = _nest("layer_first", "page_first_direct", c=1, layer=2)   # one-step loops vanish
    assert mla_layer == native.LoopNest((), chunk, 0, False)


# --------------------------------------------------------------------- build, cache, fallback


@pytest.fixture
def private_native(tmp_path, monkeypatch):
    """A fresh native decision and an empty cache directory; the real state comes back after."""
    saved_loaded, saved_reason, saved_chosen = dict(native._loaded), list(native._reason), dict(dispatch._chosen)
    monkeypatch.setenv(native.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.delenv(native.ENV_DISABLE, raising=False)
    monkeypatch.delenv(dispatch.ENV, raising=False)
    native.forget()
    dispatch._chosen.clear()
    yield tmp_path / "cache"
    native.forget()
    native._loaded.update(saved_loaded)
    native._reason[:] = saved_reason
    dispatch._chosen.clear()
    dispatch._chosen.update(saved_chosen)


def test_an_unbuildable_library_falls_back_to_torch_with_one_warning(private_native, monkeypatch, gen):
    monkeypatch.setenv(native.ENV_CC, str(private_native.parent / "no-such-cc"))
    with pytest.warns(RuntimeWarning, match="torch fallback") as caught:
        assert kernels.backend("cpu") is Backend.TORCH
    assert len(caught) == 1 and "no-such-cc" in native.unavailable_reason()
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # decided once: no second warning
        assert native.library() is None
        src = random_bits((2, 2, 8, 1, 4), torch.float16, gen)
        dst = torch.zeros(2, 8, 2, 1, 4, dtype=torch.float16)
        kernels.transfer_pages(src, dst, torch.tensor([3, 0]), torch.tensor([1, 2]), page_size=2,
                               dst_layout="page_first")
    want = torch.zeros_like(dst)
    transfer.transfer_pages_torch(src, want, torch.tensor([3, 0]), torch.tensor([1, 2]), page_size=2,
                                  dst_layout="page_first")
    assert same_bits(dst, want)
    assert list(private_native.iterdir()) == []          # the failed build left no temporary file


def test_hicache_native_0_selects_torch_silently(private_native, monkeypatch):
    monkeypatch.setenv(native.ENV_DISABLE, "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernels.backend("cpu") is Backend.TORCH
    assert native.unavailable_reason() == f"{native.ENV_DISABLE}=0"
    assert not private_native.exists()                  # nothing was built


def test_forcing_the_native_backend_where_it_cannot_load_is_an_error(private_native, monkeypatch):
    monkeypatch.setenv(native.ENV_DISABLE, "0")
    monkeypatch.setenv(dispatch.ENV, "native")
    with pytest.raises(ValueError, match="HICACHE_KERNEL_BACKEND=native"):
        kernels.backend("cpu")


def test_the_library_is_built_once_and_loaded_from_the_cache(lib, private_native, monkeypatch):
    path = native.library_path()
    assert path.parent == private_native and not path.exists()
    first = native.load()
    assert first.hicache_pagecopy_abi() == native.ABI_VERSION
    assert sorted(p.name for p in private_native.iterdir()) == [path.name]      # the temp file was renamed
    built = path.stat()

    def no_build(_path):
        raise AssertionError("rebuilt although the cache holds the library")

    monkeypatch.setattr(native, "build", no_build)
    assert native.load().hicache_pagecopy_abi() == native.ABI_VERSION
    # A second process finds it too (it cannot build: its compiler does not exist).
    script = textwrap.dedent("""
        from hicache.kernels import native
        native.build = None
        assert native.load().hicache_pagecopy_abi() == native.ABI_VERSION
        print("loaded", native.library_path())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, native.ENV_CACHE: str(private_native)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == f"loaded {path}"
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (built.st_ino, built.st_mtime_ns)


def test_a_damaged_cached_library_is_rebuilt(lib, private_native):
    path = native.library_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a shared library")
    assert native.load().hicache_pagecopy_abi() == native.ABI_VERSION
    assert path.read_bytes()[:4] != b"not "


def test_the_cache_key_follows_source_compiler_and_flags(private_native, monkeypatch):
    base = native.library_path()
    monkeypatch.setattr(native, "CFLAGS", (*native.CFLAGS, "-DEXTRA"))
    with_flag = native.library_path()
    monkeypatch.setenv(native.ENV_CC, "gcc")
    with_cc = native.library_path()
    assert len({base, with_flag, with_cc}) == 3 and all(p.parent == private_native for p in (base, with_flag, with_cc))


@pytest.mark.parametrize("seed", range(40))
def test_native_index_check_agrees_with_a_python_reference(lib, seed):
    """check_pages: the first index out of [0, limit) or (unique) repeated, in list order."""
    g = torch.Generator().manual_seed(seed)
    limit = int(torch.randint(1, 300, (1,), generator=g))
    n = int(torch.randint(0, 2 * limit, (1,), generator=g))
    ids = torch.randint(-3, limit + 3, (n,), generator=g, dtype=torch.int64)
    for unique in (False, True):
        seen, want = set(), (-1, 0)
        for i, p in enumerate(ids.tolist()):
            if not 0 <= p < limit:
                want = (i, 1)
                break
            if unique and p in seen:
                want = (i, 2)
                break
            seen.add(p)
        assert native.check_pages(ids, limit, unique) == want


def test_page_list_names_the_bad_index_with_the_native_check(lib):
    from hicache.kernels.layout import page_list
    with pytest.raises(ValueError, match="duplicate destination page indices"):
        page_list(torch.tensor([3, 1, 3]), "dst_pages", 8, unique=True)
    with pytest.raises(ValueError, match=r"page index 9 out of range \[0, 8\)"):
        page_list(torch.tensor([3, 9, 1]), "dst_pages", 8, unique=True)
    assert page_list(torch.tensor([3, 1, 3]), "src_pages", 8, unique=False).tolist() == [3, 1, 3]
