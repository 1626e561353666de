"""The StorageBackend contract, run against the file store and a real Mooncake Store."""
from __future__ import annotations

import functools
import threading

import pytest
import torch

from hicache.storage import envelope
from hicache.storage.base import StorageBackend
from hicache.storage.faulty import FaultConfig, FaultyStorage
from hicache.storage.file_store import FileStorage
from hicache.storage.safe import SafeConfig, SafeStorage

DTYPES = (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float32)


def delta(backend, before: dict[str, int]) -> dict[str, int]:
    after = backend.stats()
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}


def random_page(gen: torch.Generator, dtype: torch.dtype, elems: int = 96) -> torch.Tensor:
    """Bytes of a random KV page of `dtype` (fp8 from random bytes: every bit pattern)."""
    if dtype.itemsize == 1:
        return torch.randint(0, 256, (elems,), dtype=torch.uint8, generator=gen)
    return torch.randn(elems, generator=gen).to(dtype).view(torch.uint8)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_pages_bit_exact(backend, fresh_key, dtype):
    gen = torch.Generator().manual_seed(7)
    pages = [random_page(gen, dtype) for _ in range(5)]
    keys = [fresh_key(i) for i in range(5)]
    before = backend.stats()
    assert backend.batch_set(keys, pages) == [True] * 5
    got = backend.batch_get(keys)
    for page, val in zip(pages, got):
        assert val is not None and val.dtype == torch.uint8 and val.dim() == 1
        assert torch.equal(val, page)
        assert torch.equal(val.view(dtype).view(torch.uint8), page.view(dtype).view(torch.uint8))
    assert delta(backend, before) == {"set_ok": 5, "get_hit": 5}


def test_exists_counts_leading_present_keys(backend, fresh_key):
    k = [fresh_key(i) for i in range(4)]
    page = torch.arange(32, dtype=torch.uint8)
    assert backend.batch_set([k[0], k[1], k[3]], [page, page, page]) == [True] * 3
    assert backend.batch_exists(k) == 2                 # present, present, missing, present
    assert backend.batch_exists([k[2], k[0]]) == 0
    assert backend.batch_exists([k[3]]) == 1
    assert backend.batch_exists([]) == 0
    assert backend.batch_set([k[2]], [page]) == [True]
    assert backend.batch_exists(k) == 4


def test_missing_page_is_a_counted_miss(backend, fresh_key):
    before = backend.stats()
    assert backend.batch_get([fresh_key(0), fresh_key(1)]) == [None, None]
    assert backend.batch_get([]) == []
    assert delta(backend, before) == {"get_miss": 2}


def test_every_single_byte_corruption_is_a_miss_then_restorable(backend, fresh_key):
    page = torch.arange(8, dtype=torch.uint8) * 3
    key = fresh_key(0)
    stored = envelope.HEADER_BYTES + page.numel()
    for offset in range(stored):
        assert backend.batch_set([key], [page]) == [True]
        assert backend.tamper(key, offset)
        before = backend.stats()
        assert backend.batch_get([key]) == [None], f"flip at byte {offset} not detected"
        assert delta(backend, before) == {"get_corrupt": 1}
        assert backend.batch_exists([key]) == 0          # a bad page is removed...
    assert backend.batch_set([key], [page]) == [True]    # ...so it can be stored again
    assert torch.equal(backend.batch_get([key])[0], page)


def test_page_under_another_key_is_a_miss(backend, fresh_key):
    """The checksum binds the key: bytes stored for one key never serve another."""
    a, b = fresh_key(0), fresh_key(1)
    page = torch.full((16,), 5, dtype=torch.uint8)
    blob = envelope.encode(a, page.numpy())
    if isinstance(backend, FileStorage):
        backend.path_of(b).parent.mkdir(exist_ok=True)
        backend.path_of(b).write_bytes(blob)
    else:
        assert backend._store.put(b, blob) == 0
    assert backend.batch_get([b]) == [None]


def test_zero_copy_rows_round_trip(backend, fresh_key):
    gen = torch.Generator().manual_seed(3)
    slots, page_bytes = 8, 64
    src = torch.randint(0, 256, (slots, page_bytes), dtype=torch.uint8, generator=gen)
    dst = torch.full((slots, page_bytes), 0xAB, dtype=torch.uint8)
    backend.register_buffer(src)
    backend.register_buffer(dst)
    keys = [fresh_key(i) for i in range(3)]
    assert backend.batch_set_from(keys, src, [3, 1, 5]) == [True] * 3
    before = backend.stats()
    assert backend.batch_get_into(keys, dst, [0, 2, 4]) == [True] * 3
    assert torch.equal(dst[[0, 2, 4]], src[[3, 1, 5]])
    assert bool((dst[[1, 3, 5, 6, 7]] == 0xAB).all())   # rows not named are untouched
    assert delta(backend, before) == {"get_hit": 3}
    # The zero-copy and copying calls agree on the stored form.
    assert torch.equal(backend.batch_get([keys[1]])[0], src[1])
    # A missing key or a row of another size is a miss, never a partial page.
    small = torch.zeros((2, 32), dtype=torch.uint8)
    assert backend.batch_get_into([fresh_key(9), keys[0]], dst, [6, 7]) == [False, True]
    assert backend.batch_get_into([keys[0]], small, [0]) == [False]
    assert torch.equal(backend.batch_get([keys[0]])[0], src[3])   # size mismatch keeps the page


def test_zero_copy_non_contiguous_rows(backend, fresh_key):
    """A layer-first host layout: one page's bytes are strided across layers."""
    layers, slots, width = 3, 4, 16
    host = torch.arange(layers * slots * width, dtype=torch.int64).remainder(251).to(torch.uint8)
    src = host.view(layers, slots, width).transpose(0, 1)      # (slots, layers, width) view
    assert not src[1].is_contiguous()
    keys = [fresh_key(0), fresh_key(1)]
    assert backend.batch_set_from(keys, src, [1, 2]) == [True, True]
    out_host = torch.zeros(layers, slots, width, dtype=torch.uint8)
    dst = out_host.transpose(0, 1)
    assert backend.batch_get_into(keys, dst, [2, 0]) == [True, True]
    assert torch.equal(dst[2], src[1]) and torch.equal(dst[0], src[2])
    assert bool((dst[1] == 0).all()) and bool((dst[3] == 0).all())


def test_rows_and_values_are_validated(backend, fresh_key):
    buf = torch.zeros(2, 8, dtype=torch.uint8)
    with pytest.raises(ValueError, match="rows"):
        backend.batch_get_into([fresh_key(0)], buf, [0, 1])
    with pytest.raises(ValueError, match="rows"):
        backend.batch_set_from([fresh_key(0)], buf, [2])
    with pytest.raises(ValueError, match="uint8"):
        backend.batch_set([fresh_key(0)], [torch.zeros(4, dtype=torch.float16)])
    for bad in ("../etc", ".hidden", "a/b", "", "k" * 300):
        with pytest.raises(ValueError, match="key"):
            backend.batch_exists([bad])


def test_a_batch_names_each_key_once_and_each_row_once(backend, fresh_key):
    """A key twice in one Mooncake read came back once as zeros, failed verification and
    removed the good page; two pages into one row lost one and reported both read; a str
    for `keys` was stored character by character. Each is refused, and the page stays."""
    page = torch.arange(48, dtype=torch.uint8)
    k = fresh_key(0)
    assert backend.batch_set([k], [page]) == [True]
    with pytest.raises(ValueError, match="at positions 0 and 1"):
        backend.batch_get([k, k])
    with pytest.raises(ValueError, match="at positions 0 and 1"):
        backend.batch_get_into([k, k], torch.zeros(2, 48, dtype=torch.uint8), [0, 1])
    with pytest.raises(ValueError, match="row 0 given twice"):
        backend.batch_get_into([k, fresh_key(1)], torch.zeros(2, 48, dtype=torch.uint8), [0, 0])
    with pytest.raises(ValueError, match="row True is not an integer"):
        backend.batch_get_into([k], torch.zeros(2, 48, dtype=torch.uint8), [True])
    with pytest.raises(ValueError, match="keys: a sequence of keys, got one str"):
        backend.batch_get("abcd")
    assert backend.batch_exists([k]) == 1
    (got,) = backend.batch_get([k])
    assert got is not None and torch.equal(got, page)


def test_concurrent_writers_and_readers(backend, fresh_key):
    """Writers (two per page, same bytes) and readers race; a reader sees the exact page or a
    miss, never other bytes, and every page is stored at the end."""
    n_pages, n_threads = 24, 4
    keys = [fresh_key(i) for i in range(n_pages)]
    pages = [torch.full((256,), i, dtype=torch.uint8) for i in range(n_pages)]
    start = threading.Barrier(n_threads * 2)
    errors: list[str] = []
    before = backend.stats()

    def writer(t: int) -> None:
        start.wait()
        for i in range(t % 2, n_pages, 2):       # each page written by two threads
            if backend.batch_set([keys[i]], [pages[i]]) != [True]:
                errors.append(f"set {i} failed")

    def reader(t: int) -> None:
        start.wait()
        for _ in range(3):
            for i, val in enumerate(backend.batch_get(keys)):
                if val is not None and not torch.equal(val, pages[i]):
                    errors.append(f"reader {t} saw wrong bytes for page {i}")

    threads = ([threading.Thread(target=writer, args=(t,)) for t in range(n_threads)]
               + [threading.Thread(target=reader, args=(t,)) for t in range(n_threads)])
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert backend.batch_exists(keys) == n_pages
    assert all(torch.equal(v, p) for v, p in zip(backend.batch_get(keys), pages))
    assert "get_corrupt" not in delta(backend, before)


def test_file_store_layout_and_atomic_publish(tmp_path):
    store = FileStorage(tmp_path)
    key = "ab" + "0" * 62
    page = torch.arange(10, dtype=torch.uint8)
    assert store.batch_set([key], [page]) == [True]
    path = tmp_path / "ab" / key
    assert store.path_of(key) == path
    assert path.read_bytes() == envelope.encode(key, page.numpy())
    assert [p.name for p in (tmp_path / "ab").iterdir()] == [key]   # no temporary left over
    path.write_bytes(path.read_bytes()[:-1])                         # truncated: a miss
    assert store.batch_get([key]) == [None]
    assert not path.exists()


def test_concurrent_zero_copy_threads(backend, fresh_key):
    """Backup and prefetch threads share one host buffer on disjoint rows (per-thread
    scratch in the backend must keep their headers apart)."""
    n_threads, per_thread, width = 4, 6, 128
    host = torch.zeros(n_threads * per_thread * 2, width, dtype=torch.uint8)
    for r in range(n_threads * per_thread):
        host[r].fill_(r + 1)
    backend.register_buffer(host)
    start = threading.Barrier(n_threads)
    results: dict[int, list[bool]] = {}

    def worker(t: int) -> None:
        rows = list(range(t * per_thread, (t + 1) * per_thread))
        keys = [fresh_key(r) for r in rows]
        start.wait()
        stored = backend.batch_set_from(keys, host, rows)
        back = [r + n_threads * per_thread for r in rows]
        results[t] = stored + backend.batch_get_into(keys, host, back)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(results[t] == [True] * (2 * per_thread) for t in range(n_threads))
    half = n_threads * per_thread
    assert torch.equal(host[half:], host[:half])


def test_file_store_things_that_are_no_page_are_misses(tmp_path, monkeypatch):
    """A FIFO in a page's place blocked the read forever, a directory raised
    IsADirectoryError, and a corrupt page in a read-only store raised from its unlink and
    lost the good pages of the same batch: each is now a counted miss."""
    import os
    store = FileStorage(tmp_path)
    page = torch.arange(32, dtype=torch.uint8)
    keys = ["a" * 32, "b" * 32, "c" * 32, "d" * 32]
    assert store.batch_set(keys, [page] * 4) == [True] * 4
    os.unlink(store.path_of(keys[0]))
    os.mkfifo(store.path_of(keys[0]))                 # a FIFO: open would block
    os.unlink(store.path_of(keys[1]))
    os.mkdir(store.path_of(keys[1]))                  # a directory
    with open(store.path_of(keys[2]), "r+b") as f:    # a corrupt page whose unlink fails
        f.seek(-1, os.SEEK_END)
        f.write(b"\xff")

    def read_only(self, missing_ok=False):
        raise PermissionError(30, "Read-only file system", str(self))
    monkeypatch.setattr(type(store.path_of(keys[2])), "unlink", read_only)
    got = store.batch_get(keys)
    assert got[:3] == [None, None, None] and torch.equal(got[3], page)     # the good page survives
    assert store.stats()["get_miss"] == 2 and store.stats()["get_corrupt"] == 1


def test_mooncake_scratch_of_an_ended_thread_is_unregistered(mooncake_store, fresh_key):
    """Each thread's registered scratch slab stayed registered after the thread ended: a
    caller that runs every call on a new thread (SafeStorage under a timeout) grew the
    registered memory by one slab per call. Now a thread's slabs go when it does."""
    import gc

    from hicache.storage.safe import SafeConfig, SafeStorage
    safe = SafeStorage(mooncake_store, SafeConfig(timeout_s=30))
    before = len(mooncake_store._regions)
    page = torch.zeros(4096, dtype=torch.uint8)
    for i in range(40):
        assert safe.batch_set([fresh_key(i)], [page]) == [True]     # each on its own thread
    gc.collect()
    assert len(mooncake_store._regions) <= before + 1
    (got,) = mooncake_store.batch_get([fresh_key(0)])
    assert got is not None and torch.equal(got, page)


def test_mooncake_close_never_closes_the_client_under_a_call_and_refuses_later_calls(mooncake_master, fresh_key):
    """A call after close() went into the closed client and crashed the process (SIGSEGV),
    and close() closed the client under a call still inside it. Now close refuses later calls
    (StorageClosed) and waits for those in flight, bounded: past the bound the client is left
    open (a leak, said in close_skipped), never closed under a call; a later close closes it."""
    from hicache.storage.base import StorageClosed
    from hicache.storage.mooncake_store import MooncakeStorage, MooncakeStoreConfig
    from hicache.storage.safe import SafeStorage
    store = MooncakeStorage(MooncakeStoreConfig.for_master(mooncake_master))
    native = store._store
    entered, release = threading.Event(), threading.Event()
    inside, closed_with = [0], []

    class Gated:
        """The native client; batch_is_exist is held inside it until released."""
        def __getattr__(self, name):
            return getattr(native, name)

        def batch_is_exist(self, keys):
            inside[0] += 1
            entered.set()
            try:
                assert release.wait(30), "test never released the call"
                return native.batch_is_exist(keys)
            finally:
                inside[0] -= 1

        def close(self):
            closed_with.append(inside[0])    # calls inside the client as it is closed
            return native.close()

    store._store = Gated()
    key, page = fresh_key(0), torch.arange(64, dtype=torch.uint8)
    rows = torch.zeros(1, 64, dtype=torch.uint8)
    assert store.batch_set([key], [page]) == [True]
    got: list[int] = []
    th = threading.Thread(target=lambda: got.append(store.batch_exists([key])))
    th.start()
    try:
        assert entered.wait(30)
        with pytest.warns(RuntimeWarning, match=r"1 call\(s\) still in the client"):
            store.close(drain_s=0.05)
        assert closed_with == [] and "left it open" in store.close_skipped
        for call in (lambda: store.batch_exists([key]), lambda: store.batch_get([key]),
                     lambda: store.batch_set([fresh_key(1)], [page]),
                     lambda: store.batch_get_into([key], rows, [0]),
                     lambda: store.batch_set_from([fresh_key(1)], rows, [0]),
                     lambda: store.tamper(key, 0)):
            with pytest.raises(StorageClosed, match="the client is closed"):
                call()
        safe = SafeStorage(store)                # behind the guard: a counted miss
        assert safe.batch_get([key]) == [None] and safe.stats()["call_error"] == 1
    finally:
        release.set()
        th.join()
    assert got == [1]                            # the call in flight ended on the open client
    store.close()
    store.close()
    assert closed_with == [0] and store.close_skipped is None


def host_rows(layout: str, n_rows: int, row_bytes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A host buffer filled with 0xAB, and its (slots, ...) view: contiguous rows, or a
    layer-first layout (two layers) in which each row is strided."""
    if layout == "contiguous":
        host = torch.full((n_rows, row_bytes), 0xAB, dtype=torch.uint8)
        return host, host
    host = torch.full((2, n_rows, row_bytes // 2), 0xAB, dtype=torch.uint8)
    return host, host.transpose(0, 1)


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("call", ["own", "default"])
def test_a_page_of_another_size_than_the_row_is_corrupt_never_a_hit(backend, fresh_key, layout, call):
    """Mooncake's path for strided rows and the interface's default batch_get_into read
    through batch_get, which knew no row size: a page of another size than the row was
    counted a hit (and then dropped). Every path now checks the size as it reads: a miss
    counted corrupt only, nothing copied into the row, and the page kept (it may be intact
    for a differently shaped pool)."""
    get_into = (backend.batch_get_into if call == "own"
                else functools.partial(StorageBackend.batch_get_into, backend))
    key, page = fresh_key(0), torch.arange(48, dtype=torch.uint8)
    assert backend.batch_set([key], [page]) == [True]
    for row_bytes in (32, 64):                     # a row smaller and one larger than the page
        host, dst = host_rows(layout, 2, row_bytes)
        before = backend.stats()
        assert get_into([key], dst, [1]) == [False]
        assert delta(backend, before) == {"get_corrupt": 1}
        if call == "default" or layout == "strided":   # (a False row's bytes are unspecified
            assert bool((host == 0xAB).all())          # only where the backend reads in place)
    before = backend.stats()
    assert torch.equal(backend.batch_get([key])[0], page)
    assert delta(backend, before) == {"get_hit": 1}


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("timeout_s", [None, 30.0])
def test_safe_storage_counts_a_page_of_another_size_corrupt_in_every_layer(backend, fresh_key, timeout_s, layout):
    """Under a timeout SafeStorage reads into the worker's own tensors through batch_get,
    which knew no row size: the backend counted a page of another size than the row a hit
    and the wrapper counted it corrupt, so every layer's stats said hit and the merged ones
    said both. The worker now asks for pages of the row's size: each layer counts what it
    counts without a timeout, a corrupt page and no hit; a page of the right size is a hit."""
    faulty = FaultyStorage(backend, FaultConfig())
    safe = SafeStorage(faulty, SafeConfig(timeout_s=timeout_s))   # (not closed: the module's client)
    layers = (safe, faulty, backend)
    wrong, right = fresh_key(0), fresh_key(1)
    assert safe.batch_set([wrong], [torch.arange(48, dtype=torch.uint8)]) == [True]
    assert safe.batch_set([right], [torch.arange(64, dtype=torch.uint8)]) == [True]
    host, dst = host_rows(layout, 2, 64)
    before = [layer.stats() for layer in layers]
    assert safe.batch_get_into([wrong], dst, [0]) == [False]
    assert [delta(layer, b) for layer, b in zip(layers, before)] == [{"get_corrupt": 1}] * 3
    if timeout_s is not None or layout == "strided":
        assert bool((host == 0xAB).all())
    before = [layer.stats() for layer in layers]
    assert safe.batch_get_into([right], dst, [1]) == [True]
    assert [delta(layer, b) for layer, b in zip(layers, before)] == [{"get_hit": 1}] * 3
    assert torch.equal(dst[1], torch.arange(64, dtype=torch.uint8).view(dst[1].shape))
