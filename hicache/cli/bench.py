"""`hicache bench {checker,monitors,tree,kernels}`: dispatch by table to hicache.bench.*.

Each bench module exposes ``add_arguments(parser)`` (optional) and ``run(args) -> dict``;
every comparison in the dict carries a ``ratio`` beside the two absolute figures.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from hicache.cli.main import EXIT_USAGE
from hicache.cli.output import emit, refuse

BENCHES: dict[str, str] = {
    "checker": "hicache.bench.checker",
    "monitors": "hicache.bench.monitors",
    "tree": "hicache.bench.tree",
    "kernels": "hicache.bench.kernels",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("which", choices=sorted(BENCHES), help="which benchmark")
    p.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    p.add_argument("--runs", type=int, default=3, help="repetitions (at least 1); the best is reported")
    p.add_argument("--out", help="also write the JSON result to this file")


def _usage_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the options, checked before a benchmark that may run for minutes."""
    if args.runs < 1:   # (the benches used to clamp it to 1 silently)
        return f"--runs: must be a positive int (repetitions), got {args.runs}"
    if args.out:
        if os.path.isdir(args.out):
            return f"--out: {args.out} is a directory; name the JSON file to write"
        parent = os.path.dirname(args.out) or "."
        if not os.path.isdir(parent):
            return f"--out: {parent} is not a directory (cannot write {args.out})"
    return None


def run(args: argparse.Namespace) -> int:
    problem = _usage_error(args)
    if problem:
        return refuse(args, "hicache bench", problem, EXIT_USAGE, {})
    try:
        module = importlib.import_module(BENCHES[args.which])
    except ModuleNotFoundError as exc:
        emit(args, {"error": f"benchmark {args.which!r} is not built: {exc}"}, text=None)
        return 1
    result = module.run(args)
    if args.out:
        try:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=2)
        except OSError as exc:
            # the result is still printed (a run can take minutes); the file's failure is named
            result["out_error"] = f"{args.out}: {exc.strerror or exc}"
            emit(args, result, text=json.dumps(result, indent=2))
            print(f"hicache bench: --out: cannot write {result['out_error']}", file=sys.stderr)
            return 1
    emit(args, result, text=json.dumps(result, indent=2))
    return 0
