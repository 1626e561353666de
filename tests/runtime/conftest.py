"""Fixtures of the runtime tests (helpers live in runtime_support.py: unique module name)."""
import pytest

from runtime_support import MemStorage


@pytest.fixture
def mem_storage():
    return MemStorage()
