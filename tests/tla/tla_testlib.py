"""Shared helpers for the TLA+ toolkit tests.

`eval_many` evaluates constant TLA+ expressions by writing a tiny module that extends the
standard modules and reading back each definition's value through the compiler, exactly as
the checker builds a Model (Loader -> root Module -> Model). Several expressions can share one
module (the parser dominates the cost), so property tests batch them.
"""
from __future__ import annotations

import itertools
from pathlib import Path

from hicache.tla.cfg import parse_cfg
from hicache.tla.checker import Checker, Result, build
from hicache.tla.compiler import Model
from hicache.tla.loader import Loader

MODELS = Path(__file__).parent / "models"
HEADER = "---- MODULE {name} ----\nEXTENDS Naturals, Integers, Sequences, FiniteSets, TLC\n"
_counter = itertools.count()


def write_module(dirpath: Path, name: str, body: str) -> Path:
    path = dirpath / f"{name}.tla"
    path.write_text(HEADER.format(name=name) + body.rstrip("\n") + "\n====\n")
    return path


def eval_many(dirpath: Path, exprs: list[str], defs: str = "", constants: dict | None = None) -> list:
    """Values of `exprs` (TLA+ constant expressions), evaluated in one module."""
    name = f"T{next(_counter)}"
    body = defs + "\n" + "\n".join(f"E{i} == {e}" for i, e in enumerate(exprs))
    path = write_module(dirpath, name, body)
    loader = Loader([dirpath])
    root = loader.load_file(path)
    model = Model(loader, root, dict(constants or {}), {})
    return [model.def_value(f"E{i}")((), None, ()) for i in range(len(exprs))]



def check_model(spec: Path, cfg: Path | None = None, **build_kw) -> Result:
    """Exhaustive check through the Python API (cfg defaults to SPEC.cfg)."""
    cfg = cfg or spec.with_suffix(".cfg")
    ck = build(spec, parse_cfg(cfg.read_text(), str(cfg)), **build_kw)
    return Checker(ck).run()


def check_text(dirpath: Path, name: str, spec: str, cfg: str, **build_kw) -> Result:
    """Write SPEC (a full module text) and its cfg to dirpath and check them."""
    p = dirpath / f"{name}.tla"
    p.write_text(spec)
    c = dirpath / f"{name}.cfg"
    c.write_text(cfg)
    return check_model(p, c, **build_kw)
