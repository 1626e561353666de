"""The embedded default backend: one file per page in a sharded directory.

Layout: `<root>/<first 2 key chars>/<key>`, each file a page in the envelope format
(envelope.py). Writes go to a private temporary file beside the target and are published
with `os.replace`, which is atomic on POSIX: a concurrent reader sees no file or a whole one,
never a torn page. Temporary names start with "." and keys cannot, so they never collide.
Invariant: a page this backend returns passed `envelope.check` against its key.
A page that fails verification is unlinked, so a later `batch_set` can store it again
(writes of an existing key are skipped: keys are content addresses, see keys.py).
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import stat
import threading
from collections.abc import Sequence
from pathlib import Path

import torch

from hicache.storage import envelope
from hicache.storage.base import StorageBackend
from hicache.storage.counters import Count, Counters
from hicache.storage.hostbuf import RowTarget, byte_view, check_rows
from hicache.storage.keys import check_key, check_keys

_tmp_serial = itertools.count()  # next() is atomic under the GIL


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FileStorageConfig:
    root: str | os.PathLike
    fsync: bool = False     # fsync each page before publishing it (survives power loss)
    shard_chars: int = 2    # directory fan-out: 16**shard_chars shards for hex keys

    def __post_init__(self) -> None:
        if not str(self.root):
            raise ValueError("root: must name a directory")
        if not 0 <= self.shard_chars <= 8:
            raise ValueError(f"shard_chars: must lie in [0, 8], got {self.shard_chars}")


class FileStorage(StorageBackend):
    """Pages as files under one directory; safe for several threads and processes."""

    def __init__(self, config: FileStorageConfig | str | os.PathLike) -> None:
        if not isinstance(config, FileStorageConfig):
            config = FileStorageConfig(root=config)
        self.config = config
        self.root = Path(config.root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.counters = Counters()

    # -- paths ---------------------------------------------------------------------------
    def path_of(self, key: str) -> Path:
        check_key(key)
        n = self.config.shard_chars
        return self.root / key[:n] / key if n else self.root / key

    def _tmp_path(self, path: Path) -> Path:
        return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}."
                              f"{next(_tmp_serial)}.tmp")

    # -- interface -----------------------------------------------------------------------
    def batch_exists(self, keys: Sequence[str]) -> int:
        self.counters.add(Count.EXISTS_CALLS)
        for i, key in enumerate(keys):
            if not self.path_of(key).is_file():
                return i
        return len(keys)

    def batch_get(self, keys: Sequence[str]) -> list[torch.Tensor | None]:
        return [self._read(key, None) for key in check_keys(keys)]

    def batch_get_sized(self, keys: Sequence[str], nbytes: int) -> list[torch.Tensor | None]:
        return [self._read(key, None, nbytes) for key in check_keys(keys)]

    def batch_set(self, keys: Sequence[str], values: Sequence[torch.Tensor]) -> list[bool]:
        check_keys(keys)
        if len(keys) != len(values):
            raise ValueError(f"values: {len(values)} values for {len(keys)} keys")
        return [self._write(key, byte_view(v)) for key, v in zip(keys, values)]

    def batch_get_into(self, keys: Sequence[str], dst: torch.Tensor, rows: Sequence[int]) -> list[bool]:
        check_keys(keys)
        check_rows(keys, dst, rows, "dst")
        out = []
        for key, row in zip(keys, rows):
            target = RowTarget(dst, row)
            ok = self._read(key, target) is not None
            if ok:
                target.commit()
            out.append(ok)
        return out

    def batch_set_from(self, keys: Sequence[str], src: torch.Tensor, rows: Sequence[int]) -> list[bool]:
        check_rows(keys, src, rows, "src")
        return [self._write(key, byte_view(src[row])) for key, row in zip(keys, rows)]

    def stats(self) -> dict[str, int]:
        return self.counters.snapshot()

    # -- pages ---------------------------------------------------------------------------
    def _read(self, key: str, target: RowTarget | None, nbytes: int | None = None) -> torch.Tensor | None:
        """The verified payload (in `target` when given, else a new tensor), or None. The
        payload must be `target`'s size, else `nbytes` long when given (checked on the
        header, before anything is read: another size is counted corrupt, never a hit)."""
        if target is not None:
            nbytes = target.nbytes
        path = self.path_of(key)
        try:
            # O_NONBLOCK: a FIFO in a page's place must not block the open; anything but a
            # regular file is no page (a directory, a device, a FIFO): a miss
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:     # absent, a directory, no permission, a broken link: no page
            self.counters.add(Count.GET_MISS)
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            self.counters.add(Count.GET_MISS)
            return None
        try:
            with open(fd, "rb") as f:
                head = bytearray(envelope.HEADER_BYTES)
                got = f.readinto(head)
                verdict, length = envelope.check_header(head[:got], nbytes)
                # The announced length is checked against the file size before anything is
                # allocated: a flipped length field must not become a huge allocation.
                if (verdict is envelope.Verdict.OK
                        and os.fstat(f.fileno()).st_size != envelope.HEADER_BYTES + length):
                    verdict = envelope.Verdict.BAD_SIZE
                if verdict is envelope.Verdict.OK:
                    out = target.flat if target is not None else torch.empty(length, dtype=torch.uint8)
                    view = memoryview(out.numpy())
                    # readinto may return short counts only at EOF for regular files.
                    got = f.readinto(view) if length else 0
                    trailing = f.read(1)
                    verdict = (envelope.Verdict.BAD_SIZE if got != length or trailing
                               else envelope.check(key, head, view))
        except OSError:                 # the read itself failed (an I/O error): no page
            self.counters.add(Count.GET_MISS)
            return None
        if verdict is not envelope.Verdict.OK:
            self._reject(path, verdict)
            return None
        self.counters.add(Count.GET_HIT)
        return out

    def _reject(self, path: Path, verdict: envelope.Verdict) -> None:
        """Count a page that failed verification; unlink it unless it only has another size
        than the caller's row (then it may be intact and useful to a differently shaped pool)."""
        self.counters.add(Count.GET_CORRUPT)
        if verdict is not envelope.Verdict.BAD_LENGTH:
            try:
                path.unlink(missing_ok=True)
            except OSError:     # a read-only store: the page stays, and keeps failing its check
                pass

    def _write(self, key: str, payload: memoryview) -> bool:
        path = self.path_of(key)
        if path.is_file():
            self.counters.add(Count.SET_OK)
            return True
        tmp = self._tmp_path(path)
        try:
            path.parent.mkdir(exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(envelope.header(key, payload))
                f.write(payload)
                if self.config.fsync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            self.counters.add(Count.SET_FAIL)
            return False
        self.counters.add(Count.SET_OK)
        return True

    # -- fault injection -----------------------------------------------------------------
    def tamper(self, key: str, offset: int) -> bool:
        """Flip every bit of the stored byte at `offset` (modulo the value size), in place.

        Emulates corruption at rest for tests and FaultyStorage; False if the page is absent.
        """
        path = self.path_of(key)
        try:
            with open(path, "r+b") as f:
                size = f.seek(0, os.SEEK_END)
                if size == 0:
                    return False
                f.seek(offset % size)
                byte = f.read(1)
                f.seek(offset % size)
                f.write(bytes([byte[0] ^ 0xFF]))
        except FileNotFoundError:
            return False
        return True
