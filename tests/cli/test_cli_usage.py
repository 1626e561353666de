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
