"""`hicache check`: model-check one spec, or every model of models_checked/ (--all).

Exit codes as TLC: 0 ok, 10 POSTCONDITION false, 11 deadlock, 12 safety violation, 13 liveness,
150+ usage and parse/semantic/evaluation errors (reported as one located line, never a
traceback). A PROPERTY part that is not checked (liveness) is such an error unless
--allow-unchecked-properties.
"""
from __future__ import annotations

import argparse

from hicache.cli.output import emit, refuse

EXIT_ERROR = 150


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", nargs="?", help="the root module SPEC.tla")
    p.add_argument("--config", help="TLC model config (default: SPEC.cfg beside the spec)")
    p.add_argument("--all", action="store_true", help="check every model listed in models_checked/manifest.json")
    p.add_argument("--manifest", help="manifest path (default: models_checked/manifest.json)")
    p.add_argument("--include-slow", action="store_true", help="with --all: also the models marked slow")
    p.add_argument("--rewrite", action="store_true",
                   help="with --all: re-record counts and counterexamples into models_checked/ (review the diff)")
    p.add_argument("--simulate", action="store_true", help="random simulation instead of exhaustive search")
    p.add_argument("--depth", type=int, default=100, help="simulation: states per behavior")
    p.add_argument("--num", type=int, default=1000, help="simulation: number of behaviors")
    p.add_argument("--seed", type=int, default=0, help="simulation: random seed")
    p.add_argument("--trace-out", help="where to write the ITF trace of a violation "
                                       "(default: SPEC_CFG.itf.json in the current directory)")
    p.add_argument("--no-progress", action="store_true", help="no live progress line")
    p.add_argument("--allow-unchecked-properties", action="store_true",
                   help="report a PROPERTY part this checker does not check (liveness: <>P, P ~> Q, fairness, "
                        "...) as a warning instead of failing the run (exit 150); the property's other parts are "
                        "still checked")


def run(args: argparse.Namespace) -> int:
    if args.all:
        from hicache.tla.manifest import run_all
        return run_all(args)
    if not args.spec:
        return refuse(args, "hicache check", "give SPEC.tla or --all", EXIT_ERROR + 1)
    for flag, v in (("--depth", args.depth), ("--num", args.num)):
        if v < 1:
            return refuse(args, "hicache check", f"{flag}: must be >= 1, got {v}", EXIT_ERROR + 1)
    from hicache.tla.run import check_one
    res, payload, text = check_one(args.spec, args.config, simulate=args.simulate, depth=args.depth,
                                   num=args.num, seed=args.seed, trace_out=args.trace_out,
                                   progress=not args.no_progress and not args.json,
                                   allow_unchecked_properties=args.allow_unchecked_properties)
    emit(args, payload, text)
    return res.exit_code if res is not None else EXIT_ERROR
