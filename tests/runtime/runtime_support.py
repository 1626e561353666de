"""Runtime test support: an in-memory storage backend with fault modes,
and page stamps (the bytes a page must hold, derived from its token prefix)."""
from __future__ import annotations

import enum
import hashlib
import threading

import numpy as np
import torch

from hicache.storage.base import StorageBackend


class Fault(enum.StrEnum):
    NONE = "none"
    RAISE = "raise"        # every call raises
    NONE_VALUE = "none_value"  # get returns None, exists returns None, set returns None
    BLOCK = "block"        # calls block until released (a slow backend)


class MemStorage(StorageBackend):
    """Dict-backed backend. `fault` switches failure modes; `gate` releases BLOCK calls."""

    def __init__(self) -> None:
        self.data: dict[str, torch.Tensor] = {}
        self.fault = Fault.NONE
        self.gate = threading.Event()
        self.blocked = threading.Event()   # set once a call waits at the gate
        self.calls = 0
        self._lock = threading.Lock()

    def _enter(self):
        with self._lock:
            self.calls += 1
        if self.fault is Fault.RAISE:
            raise ConnectionError("injected")
        if self.fault is Fault.BLOCK:
            self.blocked.set()
            self.gate.wait()
        return self.fault is Fault.NONE_VALUE

    def batch_exists(self, keys):
        if self._enter():
            return None
        n = 0
        for k in keys:
            if k not in self.data:
                break
            n += 1
        return n

    def batch_get(self, keys):
        if self._enter():
            return [None] * len(keys)
        return [self.data.get(k) for k in keys]

    def batch_set(self, keys, values):
        if self._enter():
            return None
        for k, v in zip(keys, values):
            self.data[k] = v.clone()
        return [True] * len(keys)


def stamp(key: bytes, page: int, nbytes: int, page_size: int) -> torch.Tensor:
    """The bytes page `page` of `key` must hold: a digest of its whole token prefix, so a
    page restored at the wrong place or from the wrong prefix never matches."""
    end = (page + 1) * page_size * 8
    seed = hashlib.sha256(key[:end]).digest()
    reps = -(-nbytes // len(seed))
    return torch.from_numpy(np.frombuffer(seed * reps, dtype=np.uint8)[:nbytes].copy())
