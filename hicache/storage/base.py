"""The storage backend interface: one small protocol that every backend implements.

Keys are hex strings of chained SHA-256 page hashes (see hicache.runtime.hashing); one key
derivation serves `batch_exists`, `batch_get` and `batch_set` (REFERENCE.md bug 14).
Values are the raw bytes of one page (every layer, K and V) as a uint8 tensor.
A backend never returns wrong bytes: a missing or corrupt page is a miss (None).
"""
from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Sequence

import torch

from hicache.storage.hostbuf import row_nbytes


class StorageClosed(RuntimeError):
    """A call on a backend after its close() began: refused, since the connection it would
    go through may be gone (a closed Mooncake client crashes the process when called)."""


class CallThread(threading.Thread):
    """A daemon thread that runs one storage call on behalf of another thread, whose name
    is `caller` (SafeStorage's worker under a timeout)."""

    def __init__(self, target: Callable[[], None], caller: str, name: str = "hicache-storage-call") -> None:
        super().__init__(target=target, name=name, daemon=True)
        self.caller = caller


def caller_name() -> str:
    """The name of the thread a storage call is made for: the current thread's, or on a
    CallThread its caller's (so per-caller state survives the call moving to a worker)."""
    th = threading.current_thread()
    return th.caller if isinstance(th, CallThread) else th.name


class StorageBackend(abc.ABC):
    """Page store. Implementations must be safe to call from several threads."""

    @abc.abstractmethod
    def batch_exists(self, keys: Sequence[str]) -> int:
        """Number of leading keys present (stops at the first missing one)."""

    @abc.abstractmethod
    def batch_get(self, keys: Sequence[str]) -> list[torch.Tensor | None]:
        """Page bytes per key (uint8, 1-D); None for a miss or a page failing its checksum."""

    @abc.abstractmethod
    def batch_set(self, keys: Sequence[str], values: Sequence[torch.Tensor]) -> list[bool]:
        """Store pages; per key whether it was stored."""

    def batch_get_sized(self, keys: Sequence[str], nbytes: int) -> list[torch.Tensor | None]:
        """`batch_get` of pages that must be `nbytes` long (the rows of a zero-copy read):
        a page of another size is a miss (None), never a hit, and kept (it may be intact
        for another pool); a backend that counts outcomes counts it a failed verification
        (`get_corrupt`).

        The default drops other sizes from `batch_get`'s answer (and counts nothing, having
        no counters); a backend whose `batch_get` counts hits overrides it to check the size
        before counting (as the file and Mooncake backends do), and a wrapper passes it
        through to what it wraps.
        """
        return [v if v is None or v.numel() == nbytes else None for v in self.batch_get(keys)]

    def batch_get_into(self, keys: Sequence[str], dst: torch.Tensor, rows: Sequence[int]) -> list[bool]:
        """Zero-copy style: write page i into dst[rows[i]] (a uint8 view of host slots).
        (The default reads through `batch_get_sized`, so a page of another size than the
        row is no hit, and copies only pages of the row's size.)"""
        ok = []
        for row, val in zip(rows, self.batch_get_sized(keys, row_nbytes(dst))):
            good = val is not None and val.numel() == dst[row].numel()
            if good:
                dst[row].copy_(val.view(dst[row].shape))
            ok.append(good)
        return ok

    def batch_set_from(self, keys: Sequence[str], src: torch.Tensor, rows: Sequence[int]) -> list[bool]:
        """Zero-copy style: store src[rows[i]] under keys[i]."""
        return self.batch_set(keys, [src[r].reshape(-1) for r in rows])

    def register_buffer(self, buf: torch.Tensor) -> None:
        """Declare a host buffer that later zero-copy calls pass as `dst`/`src`.

        A backend that transfers through registered memory (Mooncake) registers it once here
        instead of on first use; the default needs nothing.
        """

    def stats(self) -> dict[str, int]:
        """This backend's counters by name (hits, misses, corrupt pages, ...); {} if none."""
        return {}

    def close(self) -> None:
        """Release connections and files."""
