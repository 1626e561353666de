"""Fixtures for the TLA+ toolkit tests; the helpers live in tla_testlib (a unique module name,
so that importing them never picks up another area's conftest)."""
from __future__ import annotations

import pytest

from tla_testlib import eval_many


@pytest.fixture
def tla_eval(tmp_path):
    """tla_eval(expr, defs="", constants=None) -> the value of one constant expression."""
    def ev(expr: str, defs: str = "", constants: dict | None = None):
        return eval_many(tmp_path, [expr], defs, constants)[0]
    return ev


@pytest.fixture
def tla_eval_many(tmp_path):
    """tla_eval_many(exprs, defs="", constants=None) -> their values, from one module."""
    def ev(exprs: list[str], defs: str = "", constants: dict | None = None):
        return eval_many(tmp_path, exprs, defs, constants)
    return ev
