"""open_storage: each kind opens, wraps as configured, and cleans up after itself."""
from __future__ import annotations

import pytest
import torch

from hicache.storage.factory import StorageKind, open_storage
from hicache.storage.faulty import FaultConfig, FaultyStorage
from hicache.storage.file_store import FileStorage
from hicache.storage.safe import SafeConfig, SafeStorage

PAGE = torch.arange(32, dtype=torch.uint8)
KEY = "ab" * 32


def test_file_kind_uses_a_temporary_directory_and_removes_it():
    with open_storage("file") as store:
        assert isinstance(store, SafeStorage) and isinstance(store.inner, FileStorage)
        root = store.inner.root
        assert store.batch_set([KEY], [PAGE]) == [True]
        assert torch.equal(store.batch_get([KEY])[0], PAGE)
    assert not root.exists()


def test_file_kind_keeps_a_given_root_and_wraps_faults(tmp_path):
    with open_storage(StorageKind.FILE, root=tmp_path, faults=FaultConfig(p_drop_write=1.0),
                      safe=None) as store:
        assert isinstance(store, FaultyStorage)
        assert store.batch_set([KEY], [PAGE]) == [True]
        assert store.batch_exists([KEY]) == 0
    assert tmp_path.exists()


def test_mooncake_kind_on_a_given_master(mooncake_master):
    with open_storage("mooncake", master=mooncake_master) as store:
        key = "cd" * 32
        assert store.batch_set([key], [PAGE]) == [True]
        assert torch.equal(store.batch_get([key])[0], PAGE)
    assert mooncake_master.alive()          # a given master is left running


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="kind"):
        with open_storage("s3"):
            pass


@pytest.mark.parametrize("kind", ["file", "mooncake"])
def test_teardown_closes_the_outermost_wrapper_which_closes_the_backend(request, monkeypatch, kind):
    """Teardown closed the raw backend itself and never the SafeStorage it handed out, so
    SafeStorage's close (refuse new calls, wait for those running, then close) never ran:
    a Mooncake client was closed under a running call (a crash), a temporary root removed
    under it. Now the wrapper is closed, and it closes what it wraps, each once."""
    from hicache.storage.mooncake_store import MooncakeStorage
    closed: list[str] = []
    for cls in (SafeStorage, FaultyStorage, FileStorage, MooncakeStorage):
        def spy(self, *args, _close=cls.close, **kwargs):
            closed.append(type(self).__name__)
            return _close(self, *args, **kwargs)
        monkeypatch.setattr(cls, "close", spy)
    extra = {"master": request.getfixturevalue("mooncake_master")} if kind == "mooncake" else {}
    raw = {"file": "FileStorage", "mooncake": "MooncakeStorage"}[kind]
    with open_storage(kind, faults=FaultConfig(), safe=SafeConfig(), **extra) as store:
        assert store.batch_set([KEY], [PAGE]) == [True]
    assert closed == ["SafeStorage", "FaultyStorage", raw]
    assert store.batch_exists([KEY]) == 0                  # refused: a counted miss
    assert store.last_error == "refused: the storage is closed"
    closed.clear()
    with open_storage(kind, safe=None, **extra):          # no wrapper: the backend, once
        pass
    assert closed == [raw]
