"""`hicache bench tree` runs our workloads and, without an SGLang venv, reports baseline null."""
import argparse

from hicache.bench import tree


def test_quick_bench_without_baseline(monkeypatch):
    monkeypatch.setattr(tree, "sglang_python", lambda: None)
    out = tree.run(argparse.Namespace(quick=True, runs=1, json=True))
    assert out["baseline"] is None
    cmp = out["comparisons"]
    assert set(cmp) == {"A_match_us_per_page", "B_match_us_per_page", "C_seconds",
                        "C_token_hit_rate", "L_1M_match_insert_ms"}
    for name in ("A_match_us_per_page", "B_match_us_per_page", "C_seconds"):
        assert cmp[name]["ours"] > 0 and cmp[name]["sglang"] is None and cmp[name]["ratio"] is None
    assert out["ours"]["C"]["requests"] == 1000
    assert 0 < out["ours"]["C"]["token_hit_rate"] < 1
