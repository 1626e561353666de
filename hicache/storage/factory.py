"""Open a storage tier by kind, with everything it needs, and tear it all down afterwards.

    with open_storage(StorageKind.MOONCAKE) as store:   # starts a loopback master too
        ...

The returned backend is wrapped as SafeStorage(FaultyStorage(backend)) as configured:
the runtime's background threads should always get a SafeStorage.
Teardown closes the outermost wrapper only, and it closes what it wraps: SafeStorage first
refuses new calls and waits for those still running in the backend, so the backend is never
closed (nor its directory or master removed) under a call (a closed Mooncake client crashes).
The openers below therefore never close their backend themselves.
"""
from __future__ import annotations

import contextlib
import enum
import os
import tempfile
from collections.abc import Callable, Iterator

from hicache.storage.base import StorageBackend
from hicache.storage.faulty import FaultConfig, FaultyStorage
from hicache.storage.file_store import FileStorage, FileStorageConfig
from hicache.storage.safe import SafeConfig, SafeStorage


class StorageKind(enum.StrEnum):
    FILE = "file"          # the embedded default: a directory
    MOONCAKE = "mooncake"  # Mooncake Store (a master on loopback unless one is given)


@contextlib.contextmanager
def _open_file(root: str | os.PathLike | None, **_: object) -> Iterator[StorageBackend]:
    if root is not None:
        yield FileStorage(FileStorageConfig(root=root))
        return
    with tempfile.TemporaryDirectory(prefix="hicache-pages-") as tmp:
        yield FileStorage(FileStorageConfig(root=tmp))   # removed after open_storage closed it


@contextlib.contextmanager
def _open_mooncake(master=None, mooncake_config=None, **_: object) -> Iterator[StorageBackend]:
    from hicache.storage.mooncake_server import MooncakeMaster
    from hicache.storage.mooncake_store import MooncakeStorage, MooncakeStoreConfig
    with contextlib.ExitStack() as stack:
        if mooncake_config is None:
            if master is None:
                master = stack.enter_context(MooncakeMaster.start())
            mooncake_config = MooncakeStoreConfig.for_master(master)
        yield MooncakeStorage(mooncake_config)   # the master stops after open_storage closed it


_OPENERS: dict[StorageKind, Callable[..., contextlib.AbstractContextManager[StorageBackend]]] = {
    StorageKind.FILE: _open_file,
    StorageKind.MOONCAKE: _open_mooncake,
}


@contextlib.contextmanager
def open_storage(kind: StorageKind | str, *, root: str | os.PathLike | None = None,
                 master=None, mooncake_config=None,
                 faults: FaultConfig | None = None,
                 safe: SafeConfig | None = SafeConfig()) -> Iterator[StorageBackend]:
    """A backend of `kind` for the duration of the block.

    file: pages under `root` (a temporary directory, removed afterwards, when None).
    mooncake: a client of `mooncake_config`, else of `master`, else of a master started here.
    `faults` wraps it in FaultyStorage; `safe` (on by default) wraps the result in SafeStorage.
    """
    try:
        kind = StorageKind(kind)
    except ValueError:
        raise ValueError(f"kind: unknown storage {kind!r}; expected one of "
                         f"{[k.value for k in StorageKind]}") from None
    with _OPENERS[kind](root=root, master=master, mooncake_config=mooncake_config) as store:
        try:
            if faults is not None:
                store = FaultyStorage(store, faults)
            if safe is not None:
                store = SafeStorage(store, safe)
            yield store
        finally:
            # The outermost wrapper built, which closes the backend after draining (also
            # when a wrapper failed to build: then the backend or wrapper built so far).
            store.close()
