"""The `hicache` command line: one table of subcommands, each a module of its own.

A subcommand module exposes ``add_arguments(parser)`` and ``run(args) -> int``. Modules
are imported only when their command runs, so `hicache check` never imports torch.
Every subcommand takes ``--json`` and then prints one JSON object as its last stdout line.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
import threading

#: name -> (module, one-line help). Order is the order of `hicache --help`.
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("hicache.cli.check", "model-check a spec, or every model in models_checked/"),
    "prove": ("hicache.cli.prove", "discharge the Z3 obligations (THEOREMs) of the specs"),
    "gen": ("hicache.cli.gen", "regenerate the runtime monitors from spec/"),
    "replay": ("hicache.cli.replay", "replay a request trace through the real cache"),
    "run": ("hicache.cli.run", "launch ranks on torch.distributed and serve a workload"),
    "bugzoo": ("hicache.cli.bugzoo", "run every seeded fault and report which monitor caught it"),
    "explain": ("hicache.cli.explain", "explain a recorded violation"),
    "bench": ("hicache.cli.bench", "benchmarks, with ratios against their baselines"),
}

#: exit code for usage errors (TLC reserves 150+ for usage/parse errors).
EXIT_USAGE = 150


def _available() -> dict[str, tuple[str, str]]:
    """Commands whose module exists in this build."""
    out = {}
    for name, (mod, help_) in COMMANDS.items():
        if importlib.util.find_spec(mod) is not None:
            out[name] = (mod, help_)
    return out


class UsageExit(SystemExit):
    """A command line argparse refused (exit EXIT_USAGE); `message` is the error line."""

    def __init__(self, message: str) -> None:
        super().__init__(EXIT_USAGE)
        self.message = message


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2; TLC's usage code is 150
        self.print_usage(sys.stderr)
        line = f"{self.prog}: error: {message}"
        print(line, file=sys.stderr)
        raise UsageExit(line)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hicache", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, (mod, help_) in _available().items():
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
        p.set_defaults(_module=mod)
        importlib.import_module(mod).add_arguments(p)
    return parser


#: commands whose output must not depend on Python's string-hash randomization: the order
#: in which sets of strings and model values are enumerated decides which of several shortest
#: counterexamples BFS reports (TLC with one worker is deterministic; so are we).
_PINNED_HASH_SEED = frozenset({"check", "explain"})


def _pin_hash_seed(argv: list[str]) -> None:
    if argv and argv[0] in _PINNED_HASH_SEED and os.environ.get("PYTHONHASHSEED") != "0":
        env = dict(os.environ, PYTHONHASHSEED="0")
        os.execve(sys.executable, [sys.executable, "-m", "hicache.cli", *argv], env)


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # a real command-line invocation (not a call from Python code)
        _pin_hash_seed(sys.argv[1:])
    try:
        args = build_parser().parse_args(argv)
    except UsageExit as e:
        # --json promises one JSON object as the last stdout line, a refused command line
        # included (a script reading it otherwise finds nothing to parse)
        if "--json" in (sys.argv[1:] if argv is None else argv):
            print(json.dumps({"result": "error", "error": e.message}))
        raise
    module = importlib.import_module(args._module)
    # SIGTERM (a timeout, a job scheduler) unwinds like Ctrl-C: what a command started (a
    # Mooncake master, rank processes, temporary folders) is stopped by its own cleanup,
    # which a bare SIGTERM would skip, leaving the master running
    previous = _on_sigterm()
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except _Terminated:
        print("terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so that cleanup code runs."""


def _on_sigterm():
    """Install the SIGTERM handler (main thread only); the handler it replaced, or None."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def terminate(signum, frame):
        raise _Terminated()
    return signal.signal(signal.SIGTERM, terminate)


if __name__ == "__main__":
    sys.exit(main())
