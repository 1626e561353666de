"""`hicache check --simulate`: random behaviors, deterministic for a seed."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from tla_testlib import MODELS
from hicache.tla.itf import decode
from test_tla_models import naive_next


def simulate(tmp_path, spec, depth, num, seed, name="sim.itf.json", cfg=None, hash_seed="0"):
    """One CLI simulation; hash_seed varies Python's string hashing, which must not matter."""
    extra = ["--config", str(MODELS / cfg)] if cfg else []
    proc = subprocess.run([sys.executable, "-m", "hicache.cli", "check", str(MODELS / spec), *extra,
                           "--simulate", "--depth", str(depth), "--num", str(num), "--seed", str(seed),
                           "--json", "--trace-out", str(tmp_path / name)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env={**os.environ, "PYTHONHASHSEED": hash_seed})
    assert "Traceback" not in proc.stderr, proc.stderr
    payload = json.loads(proc.stdout.strip().splitlines()[-1])
    payload.pop("seconds")
    return proc.returncode, payload


def test_same_seed_same_result(tmp_path):
    a = simulate(tmp_path, "DieHard.tla", 12, 40, 7, hash_seed="1")
    b = simulate(tmp_path, "DieHard.tla", 12, 40, 7, hash_seed="2")
    assert a == b
    code, payload = a
    assert code == 0 and payload["result"] == "ok"
    assert 1 <= payload["distinct"] <= 16 and payload["depth"] == 12
    # every step of every behavior generates DieHard's 6 successors
    assert payload["generated"] >= 40 * 11 * 6


def test_same_seed_same_violation_trace(tmp_path):
    # TwoPhase's states hold sets of records over model values: their iteration order
    # follows string hashing, so this also checks the simulator does not depend on it
    args = ("TwoPhase.tla", 10, 20, 5)
    code1, p1 = simulate(tmp_path, *args, "a.itf.json", cfg="TwoPhaseCommits.cfg", hash_seed="1")
    code2, p2 = simulate(tmp_path, *args, "b.itf.json", cfg="TwoPhaseCommits.cfg", hash_seed="3")
    assert code1 == code2 == 12
    assert {k: v for k, v in p1.items() if k != "trace"} == {k: v for k, v in p2.items() if k != "trace"}
    t1 = json.loads((tmp_path / "a.itf.json").read_text())["states"]
    t2 = json.loads((tmp_path / "b.itf.json").read_text())["states"]
    assert t1 == t2


def test_simulation_finds_easy_violation_with_a_real_behavior(tmp_path):
    code, payload = simulate(tmp_path, "NaiveMutex.tla", 30, 100, 1)
    assert code == 12 and payload["result"] == "invariant" and payload["violated"] == "MutualExclusion"
    doc = json.loads((tmp_path / "sim.itf.json").read_text())
    states = []
    for st in doc["states"]:
        pc, flag = decode(st["pc"]), decode(st["flag"])
        states.append(((pc.d[0], pc.d[1]), (flag.d[0], flag.d[1])))
    assert states[0] == (("idle", "idle"), (False, False))
    for s, t in zip(states, states[1:]):
        assert t in naive_next(s)          # each step is a transition of the machine
    assert states[-1][0] == ("cs", "cs")
    assert all(s[0] != ("cs", "cs") for s in states[:-1])   # it stops at the first bad state
    assert len(states) >= 5                 # no behavior reaches it faster than the BFS depth


def test_simulation_finds_action_property_and_deadlock(tmp_path):
    code, payload = simulate(tmp_path, "Counter.tla", 20, 10, 0)
    assert code == 12 and payload["result"] == "property"
    code, payload = simulate(tmp_path, "Philosophers.tla", 50, 50, 0)
    assert code == 11 and payload["result"] == "deadlock"


def test_simulation_bounds_below_one_are_refused(capsys):
    """--depth -1 or --num 0 used to run and report a search of depth 0 or 1: refused, naming
    the flag, with the usage exit code, before the spec is read."""
    from hicache.cli.check import EXIT_ERROR
    from hicache.cli.main import main
    for flag, v in (("--depth", "-1"), ("--num", "0")):
        # (the code of check's other usage error, a missing SPEC.tla)
        assert main(["check", str(MODELS / "DieHard.tla"), "--simulate", flag, v]) == EXIT_ERROR + 1
        assert f"hicache check: {flag}: must be >= 1, got {v}" in capsys.readouterr().err


def test_simulation_checks_the_initial_part_of_a_property(tmp_path):
    # PROPERTY StartsAtTwo (x = 2, on the initial states) was not checked by --simulate
    code, payload = simulate(tmp_path, "Mixed.tla", 5, 3, 0, cfg="MixedInitProp.cfg")
    assert code == 12 and (payload["result"], payload["violated"]) == ("property", "StartsAtTwo")
