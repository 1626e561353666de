"""`hicache prove`: discharge the THEOREMs of the specs with Z3.

Default: every spec/*.tla of the checkout. Exit 0 iff every theorem is proved; 1 when
any is not (counterexample, unknown, unsupported, or a spec that does not load); 150 for
a usage error: a missing file, a bad --timeout, or a --config that does not fit a spec
(located: a name it does not declare, one assigned twice, a value other than an integer
or boolean, values that violate an ASSUME).
A spec without THEOREMs contributes nothing.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from hicache.cli.output import emit, refuse

EXIT_NOT_PROVED = 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("specs", nargs="*", help="SPEC.tla files (default: every spec/*.tla)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds per theorem (default: 30)")
    p.add_argument("--config", help="take constant values from this .cfg instead of proving for all values "
                                    "allowed by the ASSUMEs")
    p.add_argument("--jobs", type=int, default=1,
                   help="processes proving the cases of one theorem at once (a theorem whose hypothesis "
                        "pins a constant to a range, `NStages \\in 1..8`, is one case per value; default 1)")


def run(args: argparse.Namespace) -> int:
    import hicache
    from hicache.cli.main import EXIT_USAGE
    from hicache.tla.z3backend import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, ConfigRejected, prove_files

    def usage(error: str) -> int:
        return refuse(args, "hicache prove", error, EXIT_USAGE, {"theorems": [], "ok": False})

    timeout = DEFAULT_TIMEOUT_S if args.timeout is None else args.timeout
    if not (0 < timeout <= MAX_TIMEOUT_S):      # (also refuses nan; inf is above the cap)
        return usage(f"--timeout must be a number of seconds in (0, {MAX_TIMEOUT_S:.0f}], got {timeout:g}")
    if args.jobs < 1:
        return usage(f"--jobs must be an integer >= 1, got {args.jobs}")
    paths = [Path(s) for s in args.specs] or sorted((hicache.REPO_ROOT / "spec").glob("*.tla"))
    # inputs that are not there are the command line's error, refused before any proof
    # (as `hicache check` does); a spec that is there but does not load is a result
    missing = [str(p) for p in paths if not p.is_file()] + \
        ([args.config] if args.config and not Path(args.config).is_file() else [])
    if missing:
        return usage(f"no such file: {', '.join(missing)}")
    try:
        results = prove_files(paths, timeout_s=timeout, cfg_path=Path(args.config) if args.config else None,
                              jobs=args.jobs)
    except ConfigRejected as e:
        # a .cfg that does not fit is the command line's error, like a missing file: no
        # theorem is reported proved (a violated ASSUME would make every proof vacuous)
        return usage(f"--config: {e.error}")
    ok = all(r.proved for r in results)
    lines = []
    for r in results:
        lines.append(f"{r.status.value.upper():<15} {r.module}!{r.name}  ({r.seconds:.2f} s)")
        if not r.proved or r.detail != "Q.E.D.":
            lines.append(f"    {r.detail}")
    proved = sum(r.proved for r in results)
    lines.append(f"{proved} of {len(results)} theorems proved" + ("" if ok else "; NOT all proved"))
    emit(args, {"theorems": [r.as_json() for r in results], "ok": ok}, "\n".join(lines))
    return 0 if ok else EXIT_NOT_PROVED
