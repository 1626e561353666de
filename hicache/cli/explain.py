"""`hicache explain VIOLATION`: explain an ITF violation trace (from a monitor or `hicache check`).

Prints the first violating step, its action and arguments, the failing conjunct quoted from
the spec with file:line, the state diff of the last steps, whether the trace is a behavior
of the spec, and the spec's own shortest path to the same violation; `--html out.html`
also writes a self-contained page. Exit 0 when explained; 150 (the project's usage/input
code, as `hicache check`) for a bad option, a trace that cannot be read or used (the file
and the JSON field at fault are named), a trace that does not match its spec, spec/config
errors, and an HTML page that cannot be written. With --json the last stdout line is one
JSON object, on errors too: {"trace", "result": "error", "error", and "field" (a trace
field) or "location" (file:line:col in the spec) when known}.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from hicache.cli.main import EXIT_USAGE
from hicache.cli.output import emit


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("violation", help="the ITF trace (.itf.json) a monitor or `hicache check` wrote")
    p.add_argument("--spec", help="the spec module (default: the one the trace names)")
    p.add_argument("--config", help="model config (default: the trace's, else SPEC.cfg); the trace's "
                                    "recorded constants override its constants")
    p.add_argument("--html", metavar="OUT.html", help="also write a self-contained HTML page")
    p.add_argument("--max-states", type=int, default=200_000, help="spec search budget: distinct states")
    p.add_argument("--max-seconds", type=float, default=60.0, help="spec search budget: seconds")
    p.add_argument("--compound", type=int, default=3,
                   help="spec steps one trace step may stand for (coarse runtime events)")
    p.add_argument("--diff-steps", type=int, default=3, help="transitions shown in the state diff")


def _error(args: argparse.Namespace, message: str, prefix: str = "hicache explain: ", **extra) -> int:
    """One located line on stderr; with --json also the error object (its "error" as
    `hicache check --json` words it: the first line, no prefix), last on stdout."""
    print(prefix + message, file=sys.stderr)
    obj = {"trace": str(args.violation), "result": "error", "error": message.splitlines()[0]}
    obj.update({k: v for k, v in extra.items() if v is not None})
    if getattr(args, "json", False):
        emit(args, obj, None)
    return EXIT_USAGE


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:      # one does not exist (yet): compare the paths
        return Path(a).resolve() == Path(b).resolve()


def run(args: argparse.Namespace) -> int:
    from hicache.explain.analysis import Options, explain
    from hicache.explain.options import OptionError
    from hicache.explain.report import to_json, to_text
    from hicache.explain.trace import TraceError
    from hicache.tla.errors import TlaError
    try:
        opts = Options(spec=args.spec, config=args.config, max_states=args.max_states,
                       max_seconds=args.max_seconds, compound=args.compound, diff_steps=args.diff_steps)
    except OptionError as e:
        flag = "--" + e.name.replace("_", "-")
        return _error(args, f"{flag}: {e.reason}", field=flag)
    if args.html and _same_file(args.html, args.violation):
        # the page would replace the trace it explains
        return _error(args, f"--html: {args.html} is the trace itself; choose another path",
                      field="--html")
    try:
        e = explain(args.violation, opts)
    except TraceError as exc:
        return _error(args, f"{exc}", field=exc.field)
    except OSError as exc:
        return _error(args, f"cannot read {args.violation}: {exc.strerror or exc}")
    except TlaError as exc:
        return _error(args, str(exc), prefix="Error: ", location=str(exc.loc) if exc.loc else None)
    except RecursionError:
        # a value nested deeply enough to pass the reader can still exhaust the stack later
        return _error(args, f"{args.violation}: a value of the trace is nested too deeply")
    obj = to_json(e)
    text = to_text(e)
    if args.html:
        from hicache.explain.html import write_html
        try:
            write_html(e, args.html)
        except OSError as exc:
            # the analysis is still reported (nothing lost); the page's failure is named
            obj["html"], obj["html_error"] = None, f"{args.html}: {exc.strerror or exc}"
            text += f"\nHTML page not written: {obj['html_error']}"
            emit(args, obj, text)
            print(f"hicache explain: --html: cannot write {args.html} ({exc.strerror or exc})", file=sys.stderr)
            return EXIT_USAGE
        obj["html"] = args.html
        text += f"\nHTML page: {args.html}"
    emit(args, obj, text)
    return 0
