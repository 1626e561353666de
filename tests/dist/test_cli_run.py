"""`hicache run` end to end: 4 processes (CP=2 x PP=2), one JSON object as the last line."""
import json
import os
import subprocess
import sys

import pytest

from hicache.cli.main import main


def test_run_cp2_pp2_json(capsys):
    code = main(["run", "--cp", "2", "--pp", "2", "--requests", "10", "--bench-iters", "2", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0
    assert out["ranks"] == 4 and out["requests"] == 10
    assert out["violations"] == []
    assert out["agreement_checks"] == out["cache_checks"] > 0          # strict: every check verified
    tiers = out["tiers"]
    assert set(tiers) >= {"device", "host", "storage"}
    assert (sum(tiers[k]["hit_tokens"] for k in ("device", "host", "storage")) + tiers["computed_tokens"]
            == tiers["input_tokens"])
    assert 0.0 <= out["gather"]["overlap_fraction"] <= 1.0
    bench = out["gather"]["bench"]
    assert set(bench["per_layer_gather_ms"]) == {"sequential", "overlap"}
    fwd = bench["forward_ms"]
    assert fwd["ratio"] == round(fwd["overlap"] / fwd["sequential"], 4)
    assert out["events"]["LeaderAgree"] == 2 * out["cache_checks"]    # two stage-0 ranks
    assert out["events"]["StageForward"] == 2 * out["cache_checks"]   # two stage-1 ranks
    # whether the spec monitors ran on each rank is in the output (the verified mode in force)
    from hicache.monitors.maps.dist import verify_config
    on = verify_config().mode.value != "off"
    assert len(out["spec_monitors"]) == 4 and all((m is not None) == on for m in out["spec_monitors"])


def test_run_cp3_completes(capsys):
    """The QA reproducer: it used to end in exit 2 (a PeerFailure cascade) once a request left
    fewer new tokens than CP ranks; the deterministic engine-level check of that case is in
    test_multiprocess.py."""
    code = main(["run", "--cp", "3", "--pp", "1", "--requests", "12", "--bench-iters", "1", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and "error" not in out
    assert out["ranks"] == 3 and out["requests"] == 12 and out["violations"] == []
    assert out["agreement_checks"] == out["cache_checks"] > 0


def test_run_rejects_bad_options_before_starting(capsys):
    code = main(["run", "--cp", "2", "--pp", "3", "--json"])   # 3 stages cannot split 4 layers
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 150 and "pp=3" in out["error"]


def test_run_rejects_a_model_without_layers_before_starting(capsys):
    """--layers 0 used to end in a traceback (the model's own check ran outside the
    validation that reports bad options)."""
    code = main(["run", "--layers", "0", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 150 and out["error"] == "layers: must be an integer >= 1, got 0"


@pytest.mark.parametrize("args, error", [
    (["--timeout", "nan"], "timeout_s: must be a finite number > 0, got nan"),
    (["--timeout", "inf"], "timeout_s: must be a finite number > 0, got inf"),
    (["--transfer-delay", "nan"], "transfer_delay_s: must be a finite number >= 0, got nan"),
])
def test_run_rejects_non_finite_times_before_starting(capsys, args, error):
    """NaN and infinity passed the range tests and failed on every rank (a traceback from
    timedelta, a copy thread's sleep)."""
    code = main(["run", *args, "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 150 and out["error"] == error


@pytest.mark.parametrize("env, error", [
    ({"HICACHE_VERIFY": "bogus"}, "HICACHE_VERIFY: 'bogus' is not one of off, sample, strict"),
    ({"HICACHE_VERIFY": "strict", "HICACHE_VERIFY_RATE": "x"}, "HICACHE_VERIFY_RATE: 'x' is not a fraction in [0, 1]"),
])
def test_run_refuses_a_bad_verified_mode_environment_before_starting(env, error):
    """A bad HICACHE_VERIFY used to end in a traceback (exit 1, no JSON) once the launcher read
    it; it is a usage error, as in `hicache replay`. A fresh process: in this one the pytest
    plugin's verified mode, not the environment, is in force."""
    proc = subprocess.run([sys.executable, "-m", "hicache.cli", "run", "--cp", "1", "--pp", "1", "--json"],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 150, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"result": "error", "error": error}
    assert f"hicache run: {error}" in proc.stderr.splitlines()
