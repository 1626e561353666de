"""`hicache explain VIOLATION`: explain an ITF violation trace (from a monitor or `hicache check`).

Prints the first violating step, its action and arguments, the failing conjunct quoted from
the spec with file:line, the state diff of the last steps, whether the trace is a behavior
of the spec, and the spec's own shortest path to the same violation; `--html out.html`
also writes a self-contained page. Exit 0 when explained, 2 when the trace cannot be read,
150+ on spec/config errors (as `hicache check`).
"""
from __future__ import annotations

import argparse
import sys

from hicache.cli.output import emit

EXIT_UNREADABLE = 2
EXIT_ERROR = 150


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


def run(args: argparse.Namespace) -> int:
    import json

    from hicache.explain.analysis import Options, explain
    from hicache.explain.report import to_json, to_text
    from hicache.tla.errors import TlaError
    try:
        opts = Options(spec=args.spec, config=args.config, max_states=args.max_states,
                       max_seconds=args.max_seconds, compound=args.compound, diff_steps=args.diff_steps)
    except ValueError as e:
        print(f"hicache explain: {e}", file=sys.stderr)
        return EXIT_ERROR
    try:
        e = explain(args.violation, opts)
    except (OSError, ValueError, json.JSONDecodeError) as exc:
        msg = str(exc)
        # (a located error already names the file)
        where = "" if msg.startswith(str(args.violation)) else f"cannot read {args.violation}: "
        print(f"hicache explain: {where}{msg}", file=sys.stderr)
        return EXIT_UNREADABLE
    except TlaError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_ERROR
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
            return EXIT_UNREADABLE
        obj["html"] = args.html
        text += f"\nHTML page: {args.html}"
    emit(args, obj, text)
    return 0
