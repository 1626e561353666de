"""An in-process storage backend for replay sweeps: a dict of page bytes.

It answers the same `StorageBackend` protocol as the file and Mooncake backends (leading
`batch_exists`, per-key `batch_get`/`batch_set`), without capacity limits or I/O, so a
capacity sweep over a whole trace takes seconds. Metadata-only replays store a one-byte
marker per page; all markers share one object. Thread-safe: one lock around the dict.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence

import torch

from hicache.storage.base import StorageBackend
from hicache.storage.keys import check_key


class MemoryStorage(StorageBackend):
    def __init__(self) -> None:
        self._pages: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.sets = self.gets = self.exists_calls = 0

    def batch_exists(self, keys: Sequence[str]) -> int:
        with self._lock:
            self.exists_calls += 1
            pages = self._pages
            for i, key in enumerate(keys):
                if key not in pages:
                    return i
            return len(keys)

    def batch_get(self, keys: Sequence[str]) -> list[torch.Tensor | None]:
        with self._lock:
            self.gets += len(keys)
            blobs = [self._pages.get(k) for k in keys]
        return [None if b is None else torch.frombuffer(bytearray(b), dtype=torch.uint8)
                for b in blobs]

    def batch_set(self, keys: Sequence[str], values: Sequence[torch.Tensor]) -> list[bool]:
        if len(keys) != len(values):
            raise ValueError(f"values: {len(values)} values for {len(keys)} keys")
        for k in keys:
            check_key(k)
        blobs = [_MARKER if v.numel() == 1 and int(v.view(-1)[0]) == 1
                 else v.contiguous().view(torch.uint8).numpy().tobytes() for v in values]
        with self._lock:
            self.sets += len(keys)
            for k, b in zip(keys, blobs):
                self._pages.setdefault(k, b)   # keys are content addresses: first write wins
        return [True] * len(keys)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"pages": len(self._pages), "sets": self.sets, "gets": self.gets,
                    "exists_calls": self.exists_calls}


_MARKER = b"\x01"
