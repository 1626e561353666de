"""`hicache bench {checker,monitors,tree,kernels}`: dispatch by table to hicache.bench.*.

Each bench module exposes ``add_arguments(parser)`` (optional) and ``run(args) -> dict``;
every comparison in the dict carries a ``ratio`` beside the two absolute figures.
"""
from __future__ import annotations

import argparse
import importlib
import json

from hicache.cli.output import emit

BENCHES: dict[str, str] = {
    "checker": "hicache.bench.checker",
    "monitors": "hicache.bench.monitors",
    "tree": "hicache.bench.tree",
    "kernels": "hicache.bench.kernels",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("which", choices=sorted(BENCHES), help="which benchmark")
    p.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    p.add_argument("--runs", type=int, default=3, help="repetitions; the best is reported")
    p.add_argument("--out", help="also write the JSON result to this file")


def run(args: argparse.Namespace) -> int:
    try:
        module = importlib.import_module(BENCHES[args.which])
    except ModuleNotFoundError as exc:
        emit(args, {"error": f"benchmark {args.which!r} is not built: {exc}"}, text=None)
        return 1
    result = module.run(args)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    emit(args, result, text=json.dumps(result, indent=2))
    return 0
