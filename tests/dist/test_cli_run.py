"""`hicache run` end to end: 4 processes (CP=2 x PP=2), one JSON object as the last line."""
import json

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
