"""Fixtures: a file store per test; one Mooncake master per run and one client per module.

Mooncake tests skip with the reason when Mooncake cannot run here; with
HICACHE_REQUIRE_MOONCAKE=1 (set in CI) they fail instead, so CI cannot skip them silently.
"""
from __future__ import annotations

import os
import uuid

import pytest

from hicache.storage.file_store import FileStorage
from hicache.storage.mooncake_server import MooncakeMaster, MooncakeUnavailable, unavailable_reason

BACKENDS = ("file", "mooncake")


def _unavailable(reason: str) -> None:
    if os.environ.get("HICACHE_REQUIRE_MOONCAKE") == "1":
        pytest.fail(f"Mooncake required but unavailable: {reason}")
    pytest.skip(f"Mooncake unavailable: {reason}")


@pytest.fixture(scope="session")
def mooncake_available() -> None:
    """Skip (or, in CI, fail) when the Mooncake client or master binary is missing."""
    reason = unavailable_reason()
    if reason is not None:
        _unavailable(reason)


@pytest.fixture(scope="session")
def mooncake_master(mooncake_available):
    """One mooncake_master on free loopback ports for the whole run; always stopped."""
    try:
        master = MooncakeMaster.start()
    except MooncakeUnavailable as exc:
        _unavailable(str(exc))
    try:
        yield master
    finally:
        master.stop()


@pytest.fixture(scope="module")
def mooncake_store(mooncake_master):
    """One client for the module (a client's close takes seconds); tests use unique keys."""
    from hicache.storage.mooncake_store import MooncakeStorage, MooncakeStoreConfig
    store = MooncakeStorage(MooncakeStoreConfig.for_master(mooncake_master))
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    if request.param == "file":
        store = FileStorage(tmp_path / "pages")
        yield store
        store.close()
    else:
        yield request.getfixturevalue("mooncake_store")


@pytest.fixture
def fresh_key():
    """Keys unique to this test (the Mooncake store is shared by a module's tests)."""
    prefix = uuid.uuid4().hex

    def make(i: int) -> str:
        return f"{prefix}{i:08x}"
    return make
