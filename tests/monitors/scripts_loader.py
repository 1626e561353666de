"""The repository's scripts/ as modules, for their tests (scripts/ is not a package)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def script_path(name: str) -> Path:
    """scripts/<name>.py"""
    return SCRIPTS / f"{name}.py"


def load_script(name: str):
    """scripts/<name>.py imported afresh as module `name` (each call its own module object:
    a test's patches of it end with it)."""
    spec = importlib.util.spec_from_file_location(name, script_path(name))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
