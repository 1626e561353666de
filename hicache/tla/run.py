"""Run one check end to end: load the config, build, search, write the ITF trace."""
from __future__ import annotations

import sys
from pathlib import Path

from hicache.tla.cfg import load_cfg
from hicache.tla.checker import Checker, Result, build
from hicache.tla.errors import Loc, TlaError
from hicache.tla.itf import trace_to_itf, write_itf
from hicache.tla.report import summary_text


def _progress_line(p: dict) -> None:
    rate = p["distinct"] / p["seconds"] if p["seconds"] else 0.0
    sys.stderr.write(f"\rProgress: {p['generated']} states generated, {p['distinct']} distinct, "
                     f"{p['queue']} on queue, depth {p['depth']}, {rate:,.0f} distinct/s   ")
    sys.stderr.flush()


def default_cfg(spec: Path) -> Path:
    return spec.with_suffix(".cfg")


def check_one(spec: str, cfg_path: str | None, *, simulate: bool = False, depth: int = 100, num: int = 1000,
              seed: int = 0, trace_out: str | None = None, progress: bool = False,
              allow_unchecked_properties: bool = False):
    """Returns (Result or None, json payload, human text)."""
    spec_p = Path(spec)
    cfg_p = Path(cfg_path) if cfg_path else default_cfg(spec_p)
    try:
        if not spec_p.is_file():    # (before its default config, which would be reported missing)
            raise TlaError(f"no such spec file {spec_p}", Loc(str(spec_p), 0, 0))
        cfg = load_cfg(cfg_p)
        ck = build(spec_p, cfg, allow_unchecked_properties=allow_unchecked_properties)
    except TlaError as e:
        res = Result("error", error=e)
        return res, _payload(res, None), f"Error: {e}"
    except RecursionError:
        res = Result("error", error=TlaError("recursion too deep while compiling the spec", None))
        return res, _payload(res, None), f"Error: {res.error}"
    except Exception as exc:  # an internal fault is one line, never a traceback
        res = Result("error", error=TlaError(f"internal error ({type(exc).__name__}: {exc}); please report "
                                             f"it with the spec", None))
        return res, _payload(res, None), f"Error: {res.error}"
    checker = Checker(ck, progress=_progress_line if progress else None)
    try:
        res = checker.simulate(depth, num, seed) if simulate else checker.run()
    except Exception as exc:  # an internal fault must still be one located line, not a traceback
        res = Result("error", error=TlaError(f"internal error ({type(exc).__name__}: {exc}); please report it "
                                             f"with the spec", None))
    if progress:
        sys.stderr.write("\r" + " " * 100 + "\r")
    trace_path = trace_error = None
    if res.trace:
        trace_path = Path(trace_out) if trace_out else Path(f"{spec_p.stem}_{cfg_p.stem}.itf.json")
        steps = [(s.state, None if s.action is None else s.action.name) for s in res.trace]
        try:
            write_itf(trace_path, trace_to_itf(res.variables, steps, {
                "source": str(spec_p), "config": str(cfg_p), "result": res.result, "violated": res.violated,
                "description": "shortest counterexample found by hicache check"}))
        except OSError as e:
            # the result (and the behavior printed below) stands; only the file is missing
            trace_error = f"{trace_path}: {e.strerror or e}"
            trace_path = None
    text = summary_text(res)
    if trace_path:
        text += f"\nThe behavior was written as ITF to {trace_path}"
    if trace_error:
        text += f"\nThe behavior could not be written as ITF: {trace_error}"
    payload = _payload(res, trace_path)
    if trace_error:
        payload["trace_error"] = trace_error
    return res, payload, text


def _payload(res: Result, trace_path) -> dict:
    out = {"result": res.result, "distinct": res.distinct, "generated": res.generated, "depth": res.depth,
           "seconds": round(res.seconds, 4), "violated": res.violated,
           "trace": str(trace_path) if trace_path else None}
    if res.error is not None:
        out["error"] = str(res.error).splitlines()[0]
        if res.error.loc:
            out["location"] = str(res.error.loc)
    if res.warnings:
        out["warnings"] = res.warnings
    return out
