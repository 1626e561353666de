"""Mooncake Store backend: pages as objects of a Mooncake distributed store.

Every object is a page in the envelope format (envelope.py): a 24-byte header, then the page.
The zero-copy calls move the header through a small per-thread registered buffer and the page
straight between the object and the host row (Mooncake multi-buffer put/get), so no staging
copy of the page is made; the checksum is then verified on the row in place. A row whose read
fails verification is reported False and its bytes are unspecified (the caller treats it
as a miss and frees the slot).
Invariant: a True from `batch_get_into`, or a tensor from `batch_get` / `batch_get_sized`,
passed `envelope.check`.
Host buffers passed to the zero-copy calls are registered with the transfer engine once (the
whole underlying storage), and a reference is kept so registered memory is never freed before
`close` unregisters it.
Puts of an existing key keep the stored object (Mooncake does not overwrite on put): keys are
content addresses. A page that fails verification is force-removed so it can be stored again
(except one that merely has another size than the caller's row).
Close: calling the native client after its close, or closing it under a call still inside it,
crashes the process (SIGSEGV). So every call that reaches the client is counted in flight, and
`close` first refuses new calls (they raise StorageClosed), then closes the client only once
none is in flight; if some are still stuck after its bound, the client is left open (a leak,
recorded in `close_skipped` and warned about) rather than crash.
"""
from __future__ import annotations

import dataclasses
import functools
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
import torch

from hicache.storage import envelope
from hicache.storage.base import StorageBackend, StorageClosed
from hicache.storage.counters import Count, Counters
from hicache.storage.hostbuf import byte_view, check_rows, row_nbytes
from hicache.storage.keys import check_key, check_keys
from hicache.storage.mooncake_server import LOOPBACK, MooncakeMaster, MooncakeUnavailable

_H = envelope.HEADER_BYTES
CLOSE_DRAIN_S = 10.0   # how long close waits for calls in flight before leaving the client open
_F = TypeVar("_F", bound=Callable)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MooncakeStoreConfig:
    master_addr: str                      # "host:port" of mooncake_master's RPC service
    metadata_server: str                  # "http://host:port/metadata"
    local_hostname: str = LOOPBACK
    global_segment_bytes: int = 64 << 20  # memory this client contributes to the store
    local_buffer_bytes: int = 16 << 20    # the client's transfer buffer
    protocol: str = "tcp"                 # "tcp" on CPU machines, "rdma" with NICs
    device_name: str = ""                 # RDMA devices, "" for tcp

    def __post_init__(self) -> None:
        for name in ("master_addr", "metadata_server", "local_hostname", "protocol"):
            if not getattr(self, name):
                raise ValueError(f"{name}: must be non-empty")
        for name in ("global_segment_bytes", "local_buffer_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be positive, got {getattr(self, name)}")

    @classmethod
    def for_master(cls, master: MooncakeMaster, **overrides) -> MooncakeStoreConfig:
        return cls(master_addr=master.master_addr, metadata_server=master.metadata_url, **overrides)


_OBJECT_NOT_FOUND = -704   # the client's error code for an absent key
PREFLIGHT_TIMEOUT_S = 3.0


def _preflight(config: MooncakeStoreConfig) -> None:
    """Refuse at once when nothing answers at the master's RPC address or the metadata
    server: the client's own setup retries an absent master for about 90 s before it fails."""
    import socket
    from urllib.parse import urlsplit
    url = urlsplit(config.metadata_server)
    host, _, port = config.master_addr.rpartition(":")
    for what, addr in (("master", (host, port)), ("metadata server", (url.hostname, url.port))):
        try:
            socket.create_connection((addr[0], int(addr[1])), timeout=PREFLIGHT_TIMEOUT_S).close()
        except (OSError, ValueError, TypeError) as exc:
            where = config.master_addr if what == "master" else config.metadata_server
            raise MooncakeUnavailable(f"no Mooncake {what} answers at {where}: {exc}") from None


def _in_flight(method: _F) -> _F:
    """Run `method` counted in flight (close waits for it); StorageClosed once close began.
    Nested calls (batch_get_into -> batch_get) are counted twice: a count, not a lock."""
    @functools.wraps(method)
    def call(self: MooncakeStorage, *args, **kwargs):
        with self._lock:
            if self._closed:
                raise StorageClosed(f"MooncakeStorage.{method.__name__}: the client is closed "
                                    f"(master {self.config.master_addr})")
            self._calls += 1
        try:
            return method(self, *args, **kwargs)
        finally:
            with self._lock:
                self._calls -= 1
                if self._calls == 0:
                    self._idle.notify_all()
    return call  # type: ignore[return-value]


class _ThreadBuffers:
    """A thread's handle on its scratch buffers: collected when the thread ends."""
    __slots__ = ("__weakref__",)


class MooncakeStorage(StorageBackend):
    """One Mooncake Store client; safe for several threads (the client is thread-safe)."""

    def __init__(self, config: MooncakeStoreConfig) -> None:
        try:
            from mooncake.store import MooncakeDistributedStore
        except Exception as exc:
            raise MooncakeUnavailable(f"mooncake.store does not import: {exc!r}") from exc
        self.config = config
        self.counters = Counters()
        _preflight(config)
        self._store = MooncakeDistributedStore()
        rc = self._store.setup(config.local_hostname, config.metadata_server,
                               config.global_segment_bytes, config.local_buffer_bytes,
                               config.protocol, config.device_name, config.master_addr)
        if rc != 0:
            raise MooncakeUnavailable(f"MooncakeDistributedStore.setup returned {rc} "
                                      f"(master {config.master_addr})")
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)   # notified when _calls drops to 0
        # Invariant: every (start, end) here is registered and its storage object is kept alive.
        self._regions: dict[int, tuple[int, object]] = {}
        self._local = threading.local()
        # Invariant: the native client is closed only with _closed set and _calls == 0, so no
        # call is inside it then and none enters it after.
        self._calls = 0            # calls in flight (see _in_flight)
        self._closed = False       # set by close: calls are refused from then on
        self._released = False     # the native client was closed
        self.close_skipped: str | None = None   # why the last close left the client open

    # -- registered memory ---------------------------------------------------------------
    @_in_flight
    def register_buffer(self, buf: torch.Tensor) -> None:
        storage = buf.untyped_storage()
        start, n = storage.data_ptr(), storage.nbytes()
        with self._lock:
            if any(a <= start and start + n <= end for a, (end, _) in self._regions.items()):
                return
            rc = self._store.register_buffer(start, n)
            if rc != 0:
                raise RuntimeError(f"Mooncake register_buffer({n} bytes) returned {rc}")
            self._regions[start] = (start + n, storage)

    def _scratch(self, name: str, nbytes: int) -> torch.Tensor:
        """This thread's registered scratch buffer `name`, at least `nbytes` long.

        Only its own thread uses it, so it is reused without locking; it grows by doubling
        (the old one is unregistered first, then dropped).
        """
        bufs = getattr(self._local, "bufs", None)
        if bufs is None:
            # this thread's buffers are unregistered when the thread ends (its thread-local
            # holder is dropped then): a caller that runs each call on a new thread (SafeStorage
            # under a timeout) would otherwise grow the registered memory without bound
            bufs = {}
            holder = _ThreadBuffers()
            self._local.holder, self._local.bufs = holder, bufs
            weakref.finalize(holder, self._release_thread, bufs)
        buf = bufs.get(name)
        if buf is None or buf.numel() < nbytes:
            if buf is not None:
                self._unregister(buf)
            size = max(nbytes, 2 * buf.numel() if buf is not None else 64 * _H)
            buf = torch.empty(size, dtype=torch.uint8)
            self.register_buffer(buf)
            bufs[name] = buf
        return buf

    def _release_thread(self, bufs: dict) -> None:
        """Unregister the scratch buffers of a thread that ended (nothing uses them now)."""
        for buf in bufs.values():
            self._unregister(buf)
        bufs.clear()

    # -- interface -----------------------------------------------------------------------
    @_in_flight
    def batch_exists(self, keys: Sequence[str]) -> int:
        self.counters.add(Count.EXISTS_CALLS)
        if not keys:
            return 0
        flags = self._store.batch_is_exist([check_key(k) for k in keys])
        for i, flag in enumerate(flags):
            if flag != 1:   # 0 absent, -1 error: either way the prefix ends here
                return i
        return len(keys)

    @_in_flight
    def batch_get(self, keys: Sequence[str]) -> list[torch.Tensor | None]:
        return self._get(keys, None)

    @_in_flight
    def batch_get_sized(self, keys: Sequence[str], nbytes: int) -> list[torch.Tensor | None]:
        return self._get(keys, nbytes)

    def _get(self, keys: Sequence[str], nbytes: int | None) -> list[torch.Tensor | None]:
        if not keys:
            return []
        blobs = self._store.get_batch(list(check_keys(keys)))
        return [self._decode(key, blob, nbytes) for key, blob in zip(keys, blobs)]

    def _decode(self, key: str, blob: bytes, nbytes: int | None) -> torch.Tensor | None:
        """The verified payload of `blob`, or None; a payload of another length than
        `nbytes` (when given) is rejected on its header, before any hit is counted."""
        if not blob:   # the client answers a missing object with b""
            self.counters.add(Count.GET_MISS)
            return None
        verdict, _ = envelope.check_header(blob, nbytes)
        if verdict is envelope.Verdict.BAD_LENGTH:
            self._reject(key, verdict)
            return None
        verdict, payload = envelope.decode(key, blob)
        if verdict is not envelope.Verdict.OK:
            self._reject(key, verdict)
            return None
        out = torch.empty(payload.nbytes, dtype=torch.uint8)
        out.numpy()[:] = np.frombuffer(payload, dtype=np.uint8)
        self.counters.add(Count.GET_HIT)
        return out

    @_in_flight
    def batch_set(self, keys: Sequence[str], values: Sequence[torch.Tensor]) -> list[bool]:
        if len(keys) != len(values):
            raise ValueError(f"values: {len(values)} values for {len(keys)} keys")
        if not keys:
            return []
        # One contiguous registered slab per call: [header|page][header|page]...
        views = [byte_view(v) for v in values]
        sizes = [_H + v.nbytes for v in views]
        slab = self._scratch("put_slab", sum(sizes))
        flat = slab.numpy()
        ptrs, off = [], 0
        for key, view, size in zip(keys, views, sizes):
            check_key(key)
            flat[off:off + _H] = np.frombuffer(envelope.header(key, view), dtype=np.uint8)
            flat[off + _H:off + size] = np.frombuffer(view, dtype=np.uint8)
            ptrs.append(slab.data_ptr() + off)
            off += size
        return self._count_sets(self._store.batch_put_from(list(keys), ptrs, sizes))

    @_in_flight
    def batch_get_into(self, keys: Sequence[str], dst: torch.Tensor, rows: Sequence[int]) -> list[bool]:
        check_keys(keys)
        check_rows(keys, dst, rows, "dst")
        direct = [i for i, r in enumerate(rows) if dst[r].is_contiguous()]
        ok = [False] * len(keys)
        if direct:
            self.register_buffer(dst)
            heads = self._scratch("get_heads", len(direct) * _H)
            hp = heads.data_ptr()
            n = [dst[rows[i]].numel() for i in direct]
            codes = self._store.batch_get_into_multi_buffers(
                [check_key(keys[i]) for i in direct],
                [[hp + j * _H, dst[rows[i]].data_ptr()] for j, i in enumerate(direct)],
                [[_H, n[j]] for j in range(len(direct))])
            hv = heads.numpy()
            for j, (i, code) in enumerate(zip(direct, codes)):
                ok[i] = self._verify_row(keys[i], code, hv[j * _H:(j + 1) * _H], dst[rows[i]], n[j])
        # Rows that are not contiguous in the host layout take the copying path, which
        # checks the size as the direct one does: a page of another size than the row is
        # counted corrupt (never a hit) and nothing of it reaches the row.
        taken = set(direct)
        rest = [i for i in range(len(keys)) if i not in taken]
        if rest:
            vals = self._get([keys[i] for i in rest], row_nbytes(dst))
            for i, val in zip(rest, vals):
                row = dst[rows[i]]
                if val is not None and val.numel() == row.numel():
                    row.copy_(val.view(row.shape))
                    ok[i] = True
        return ok

    def _verify_row(self, key: str, code: int, head: np.ndarray, row: torch.Tensor, n: int) -> bool:
        if code < 0:
            # Absent, or present with a size that does not fit header + row (a bad page).
            if code != _OBJECT_NOT_FOUND and self._store.is_exist(key) == 1:
                self._reject(key, envelope.Verdict.BAD_LENGTH)
            else:
                self.counters.add(Count.GET_MISS)
            return False
        verdict = (envelope.Verdict.BAD_SIZE if code != _H + n
                   else envelope.check_header(head, n)[0])
        if verdict is envelope.Verdict.OK:
            verdict = envelope.check(key, head, memoryview(row.view(-1).numpy()))
        if verdict is not envelope.Verdict.OK:
            self._reject(key, verdict)
            return False
        self.counters.add(Count.GET_HIT)
        return True

    @_in_flight
    def batch_set_from(self, keys: Sequence[str], src: torch.Tensor, rows: Sequence[int]) -> list[bool]:
        check_rows(keys, src, rows, "src")
        if not keys:
            return []
        if not all(src[r].is_contiguous() for r in rows):
            return self.batch_set(keys, [src[r].reshape(-1) for r in rows])
        self.register_buffer(src)
        heads = self._scratch("put_heads", len(keys) * _H)
        hv, hp = heads.numpy(), heads.data_ptr()
        sizes = []
        for j, (key, r) in enumerate(zip(keys, rows)):
            check_key(key)
            view = byte_view(src[r])
            hv[j * _H:(j + 1) * _H] = np.frombuffer(envelope.header(key, view), dtype=np.uint8)
            sizes.append([_H, view.nbytes])
        codes = self._store.batch_put_from_multi_buffers(
            list(keys), [[hp + j * _H, src[r].data_ptr()] for j, r in enumerate(rows)], sizes)
        return self._count_sets(codes)

    def stats(self) -> dict[str, int]:
        return self.counters.snapshot()

    def close(self, drain_s: float = CLOSE_DRAIN_S) -> None:
        """Refuse later calls, wait up to `drain_s` for those in flight, then close the client.
        Calls still in flight then leave the client open (closing it under them would crash
        the process): `close_skipped` says why, a RuntimeWarning too; a later close retries."""
        with self._lock:
            self._closed = True
            if self._released:
                return
            release = self._idle.wait_for(lambda: self._calls == 0, drain_s)
            if release:   # (decided under the lock: of concurrent closes, one closes the client)
                self._released, self.close_skipped = True, None
                for start in list(self._regions):
                    self._store.unregister_buffer(start)
                self._regions.clear()
            else:
                why = self.close_skipped = (
                    f"MooncakeStorage.close: {self._calls} call(s) still in the client after "
                    f"{drain_s:g} s; left it open (a leak until exit) rather than crash")
        if not release:
            warnings.warn(why, RuntimeWarning, stacklevel=2)
            return
        self._store.close()

    # -- helpers -------------------------------------------------------------------------
    def _unregister(self, buf: torch.Tensor) -> None:
        start = buf.untyped_storage().data_ptr()
        with self._lock:
            # (after close every region is gone already, and the client with them)
            if self._regions.pop(start, None) is not None:
                self._store.unregister_buffer(start)

    def _count_sets(self, codes: Sequence[int]) -> list[bool]:
        ok = [code == 0 for code in codes]
        self.counters.add(Count.SET_OK, sum(ok))
        self.counters.add(Count.SET_FAIL, len(ok) - sum(ok))
        return ok

    def _reject(self, key: str, verdict: envelope.Verdict) -> None:
        """Count a page that failed verification; remove it unless it only has another size
        than the caller's row (then it may be intact and useful to a differently shaped pool)."""
        self.counters.add(Count.GET_CORRUPT)
        if verdict is not envelope.Verdict.BAD_LENGTH:
            self._store.remove(key, True)   # force: a read lease must not keep a bad page

    # -- fault injection -----------------------------------------------------------------
    @_in_flight
    def tamper(self, key: str, offset: int) -> bool:
        """Flip every bit of the stored byte at `offset` (modulo the value size), in place.

        Emulates corruption at rest for tests and FaultyStorage; False if the page is absent.
        """
        blob = bytearray(self._store.get(check_key(key)))
        if not blob:
            return False
        blob[offset % len(blob)] ^= 0xFF
        return self._store.upsert(key, bytes(blob)) == 0
