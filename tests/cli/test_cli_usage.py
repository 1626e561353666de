"""The command line's contract for refused command lines: exit 150 (TLC's usage code), the
error on stderr, and under --json one JSON object as the last stdout line."""
from __future__ import annotations

import json

import pytest

from hicache.cli.main import EXIT_USAGE, main


@pytest.mark.parametrize("argv, says", [
    (["explain", "--max-states", "abc", "t.json", "--json"], "argument --max-states: invalid int value: 'abc'"),
    (["check", "--bogus", "--json"], "unrecognized arguments: --bogus"),
    (["bench", "nosuch", "--json"], "argument"),
])
def test_a_refused_command_line_under_json_prints_one_json_error(capsys, argv, says):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == EXIT_USAGE
    out, err = capsys.readouterr()
    obj = json.loads(out.strip().splitlines()[-1])
    assert obj["result"] == "error" and says in obj["error"] and says in err


def test_a_refused_command_line_without_json_prints_nothing_on_stdout(capsys):
    with pytest.raises(SystemExit) as e:
        main(["check", "--bogus"])
    assert e.value.code == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and "unrecognized arguments: --bogus" in err


@pytest.mark.parametrize("argv, code, says", [
    (["check", "--json"], 151, "give SPEC.tla or --all"),
    (["check", "spec/PPSync.tla", "--depth", "0", "--json"], 151, "--depth: must be >= 1, got 0"),
    (["bugzoo", "--only", "99", "--json"], EXIT_USAGE, "--only: 99 is not a bug class of the zoo (1-14)"),
    (["prove", "spec/Nope.tla", "--json"], EXIT_USAGE, "no such file: spec/Nope.tla"),
    (["prove", "spec/CPSharding.tla", "--timeout", "nan", "--json"], EXIT_USAGE, "--timeout must be"),
    (["prove", "spec/CPSharding.tla", "--jobs", "0", "--json"], EXIT_USAGE, "--jobs must be an integer >= 1"),
])
def test_a_command_refusing_its_arguments_under_json_prints_one_json_error(capsys, argv, code, says):
    """Refusals a command makes itself (not argparse): stderr names them, and under --json the
    last stdout line is the error object (these printed nothing on stdout)."""
    assert main(argv) == code
    out, err = capsys.readouterr()
    obj = json.loads(out.strip().splitlines()[-1])
    assert says in obj["error"] and says in err
