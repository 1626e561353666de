"""Fixtures every draft test shares."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _faults_off():
    """Every draft fault switch back off after each test (a failing test would leave it on)."""
    from hicache.runtime import draft
    yield
    draft.FAULTS.skip_draft_restore = False


@pytest.fixture
def verified():
    """hicache.verified, imported by the test (importing it at collection would turn strict
    mode on for the session's first test); the suite's conftest restores the run's mode."""
    from hicache import verified
    return verified
