"""Bad and unusual replay inputs (QA sweep): each gets a located error and the usage exit
code, never a traceback or a silently wrong result."""
import gzip
import json
import os
import subprocess
import sys
import threading
import types

import numpy as np
import pytest

from hicache.cli.main import EXIT_USAGE, main
from hicache.replay.driver import ReplayConfig, TraceStream, load_requests, replay_requests
from hicache.replay.evaluate import EvalConfig, evaluate, render
from hicache.replay.trace import (MAX_HASH_ID, LoadedTrace, TraceError, TraceRequest,
                                  expand, read_trace)

SYN = "/work/shared/traces/synthetic_trace.jsonl"


def line(ts=0, n=600, out=5, ids=(7, 8)) -> str:
    return json.dumps({"timestamp": ts, "input_length": n, "output_length": out, "hash_ids": list(ids)})


def write(tmp_path, text: str | bytes, name="t.jsonl") -> str:
    p = tmp_path / name
    (p.write_bytes if isinstance(text, bytes) else p.write_text)(text)
    return str(p)


def first_lines(n: int) -> bytes:
    with open(SYN, "rb") as f:
        return b"".join(f.readline() for _ in range(n))


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def feed_pipe(data: bytes) -> str:
    """/dev/fd/N of a pipe a thread writes `data` into (what `<(cmd)` gives a command)."""
    r, w = os.pipe()

    def writer():
        with os.fdopen(w, "wb") as f:
            f.write(data)
    threading.Thread(target=writer, daemon=True).start()
    return f"/dev/fd/{r}"


# -- 1. a pipe is read once; a named FIFO is refused before open() -----------------------

def test_evaluate_from_a_pipe_sees_every_request_in_every_pass():
    """evaluate() re-opened the path per pass: from a pipe the sharded setup, the ceiling and
    the sweep saw 0 requests, and the comparison came out exit 0 and wrong."""
    path = feed_pipe(first_lines(60))
    cfg = EvalConfig(page_size=512, cp=2, device_tokens=20_480, host_tokens=102_400, sweep=(1.0,))
    ev = evaluate(path, cfg)
    ref = evaluate(SYN, EvalConfig(page_size=512, cp=2, device_tokens=20_480, host_tokens=102_400,
                                   sweep=(1.0,), limit=60))
    assert ev["setups"]["baseline"]["requests"] == ev["setups"]["sharded"]["requests"] == 60
    assert ev["ceiling"] == ref["ceiling"] and ev["ceiling"]["input_tokens"] > 0
    rates = lambda row: {k: v for k, v in row.items() if k != "seconds"}  # noqa: E731
    assert rates(ev["sweep"][0]["sharded"]) == rates(ref["sweep"][0]["sharded"])


def test_cli_evaluate_and_replay_from_stdin():
    data = first_lines(40)
    cmd = [sys.executable, "-m", "hicache.cli", "replay", "/dev/stdin", "--page-size", "512",
           "--device-tokens", "20480", "--host-tokens", "102400", "--json"]
    proc = subprocess.run(cmd + ["--evaluate", "--cp", "2"], input=data, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ev = last_json(proc.stdout.decode())
    assert ev["setups"]["sharded"]["requests"] == 40 and ev["ceiling"]["input_tokens"] > 0
    proc = subprocess.run(cmd, input=data, capture_output=True, timeout=300)   # single pass: read once
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert last_json(proc.stdout.decode())["requests"] == 40


def test_a_pipe_is_not_streamed_twice():
    stream = TraceStream(feed_pipe(first_lines(5)), 512, None)
    assert len(list(stream)) == 5
    with pytest.raises(TraceError, match="not a regular file, already read"):
        list(stream)
    loaded = LoadedTrace(feed_pipe(first_lines(5)))
    assert [r.line for r in loaded] == [1, 2, 3, 4, 5] == [r.line for r in loaded]


def test_a_named_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    got = []
    t = threading.Thread(target=lambda: got.append(pytest.raises(TraceError, list, read_trace(fifo))),
                         daemon=True)
    t.start()
    t.join(10)
    assert got, "read_trace blocked in open() on a FIFO with no writer"
    assert str(got[0].value) == (f"{fifo}: not a regular file (a named pipe: open() would wait for a "
                                 f"writer); to stream a trace, give it on stdin: hicache replay /dev/stdin < {fifo}")
    with pytest.raises(TraceError, match="not a regular file \\(a directory\\)"):
        list(read_trace(str(tmp_path)))
    with pytest.raises(TraceError, match="No such file"):
        list(read_trace(str(tmp_path / "absent.jsonl")))


# -- 2. int64 bounds ---------------------------------------------------------------------

def test_the_largest_hash_id_has_tokens_a_storage_key_can_hash(tmp_path):
    """Storage keys hash token ids as u32: the largest accepted block id's tokens are all
    below 2**32, and the next id's are not (it was accepted up to 2**54 - 1, then failed
    mid-replay with storage on: "tokens: ids must lie in [0, 2**32)", no file or line)."""
    from hicache.storage import keys
    ns = keys.namespace_hash("m")
    toks = np.frombuffer(expand(TraceRequest(1, 0, 512, 1, (MAX_HASH_ID,)), 64), dtype="<i8")
    assert toks[0] == MAX_HASH_ID * 512 and toks[-1] == 2**32 - 1
    assert len(keys.chain(ns, toks, 64)) == 8
    over = np.frombuffer(expand(TraceRequest(1, 0, 512, 1, (MAX_HASH_ID + 1,)), 64), dtype="<i8")
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 2\*\*32\)"):
        keys.chain(ns, over, 64)
    assert len(list(read_trace(write(tmp_path, line(n=512, ids=[MAX_HASH_ID]) + "\n")))) == 1


def test_cli_hash_id_past_storage_keys_is_a_located_error_before_the_replay(tmp_path, capsys):
    """bigid.jsonl of the review: id 2**23 replayed with storage failed at the first storage
    write, with no file or line; now refused at its line. 2**23 - 1 replays with storage."""
    argv = ["--json", "--page-size", "64", "--device-tokens", "512", "--host-tokens", "4096", "--storage", "memory"]
    path = write(tmp_path, "".join(line(ts=i, n=512, ids=[2**23]) + "\n" for i in range(4)))
    assert main(["replay", path, *argv]) == EXIT_USAGE
    assert last_json(capsys.readouterr().out)["error"] == (
        f"{path}:1: field 'hash_ids' has block id {2**23}, above {2**23 - 1}: its token ids (id*512 + i) "
        f"would not fit the u32 token ids of storage keys (< 2**32)")
    path = write(tmp_path, "".join(line(ts=i, n=512, ids=[2**23 - 1]) + "\n" for i in range(4)), "ok.jsonl")
    assert main(["replay", path, *argv]) == 0
    assert last_json(capsys.readouterr().out)["requests"] == 4


@pytest.mark.parametrize("bad, field", [
    (line(ids=[1, MAX_HASH_ID + 1]), "hash_ids"),    # 2**23: tokens past a storage key's u32
    (line(ids=[1, 2**54]), "hash_ids"),              # b*512 wrapped onto block 0's tokens
    (line(ids=[1, 2**63]), "hash_ids"),              # numpy OverflowError
    (line(ts=10**26), "timestamp"),                  # array('q') OverflowError in TraceStream
    (line(ts=2**63), "timestamp"),
    (line(out=2**63), "output_length"),
    (line(n=2**63, ids=[1]), "input_length"),
])
def test_values_beyond_int64_are_refused_with_file_line_field(tmp_path, bad, field):
    path = write(tmp_path, line() + "\n" + bad + "\n")
    with pytest.raises(TraceError) as exc:
        list(read_trace(path))
    assert str(exc.value).startswith(f"{path}:2: field {field!r}")


def test_cli_huge_hash_id_is_an_error_not_false_hits(tmp_path, capsys):
    path = write(tmp_path, line(ids=[1, 2**54]) + "\n" + line(ids=[1, 0]) + "\n")
    assert main(["replay", path, "--json"]) == EXIT_USAGE
    assert last_json(capsys.readouterr().out)["error"].startswith(f"{path}:1: field 'hash_ids' has block id {2**54}")


def test_a_trace_named_like_a_config_field_keeps_its_name(tmp_path, capsys, monkeypatch):
    """A config's errors name a field, rewritten to its flag (`limit: ...` -> `--limit: ...`);
    a trace's errors start with its path, which was rewritten too when the file was called
    `limit`: the message then blamed an option the user never passed."""
    monkeypatch.chdir(tmp_path)
    os.mkdir("limit")
    assert main(["replay", "limit", "--json"]) == EXIT_USAGE
    assert last_json(capsys.readouterr().out)["error"] == "limit: not a regular file (a directory)"
    assert main(["replay", "limit", "--json", "--limit", "0"]) == EXIT_USAGE     # the config's own: flagged
    assert last_json(capsys.readouterr().out)["error"].startswith("--limit: ")


def test_a_bad_violation_dir_names_the_flag(tmp_path, capsys):
    """`--violation-dir` with no directory in it: the error names the flag the user typed,
    not VerifyConfig's field (`violation_dir: ...`); an empty one is refused too (it fell back
    to the default directory, as if not given)."""
    path = write(tmp_path, line() + "\n")
    for value in (" ", ""):
        assert main(["replay", path, "--json", "--verify", "strict", "--violation-dir", value]) == EXIT_USAGE
        assert last_json(capsys.readouterr().out)["error"] == f"--violation-dir: must be a directory path, got {value!r}"


def test_replay_keeps_a_verified_mode_enabled_in_code(tmp_path, capsys):
    """A mode enabled in this process (hicache.verified.enable, the pytest option) is the
    replay's when --verify is not given, and is the process's again after the replay, also
    after --verify off (which unwrapped nothing before and reported `off` while monitored)."""
    from hicache import verified
    path = write(tmp_path, "".join(line(ts=i, ids=(7, 8 + i)) + "\n" for i in range(5)))
    argv = ["replay", path, "--json", "--page-size", "64", "--device-tokens", "4096", "--host-tokens", "8192"]
    verified.enable("sample", sample_rate=0.5, violation_dir=str(tmp_path / "v"))
    try:
        before = verified.current()
        assert main(argv) == 0
        v = last_json(capsys.readouterr().out)["verify"]
        assert v["mode"] == "sample" and v["monitors"][0]["spec"] == "spec/HostTier.tla"
        assert verified.current() == before and verified.enabled()
        assert main(argv + ["--verify", "off"]) == 0
        out = last_json(capsys.readouterr().out)
        assert "verify" not in out and out["monitors"] is None          # not monitored
        assert verified.current() == before and verified.enabled()
    finally:
        verified.disable()


def test_write_back_host_room_is_refused_in_the_replays_own_units(tmp_path, capsys):
    """With --cp the device tier is per rank: the cache's own check counted pages over every
    rank and named fields (host_pages, device_pages) no replay option sets."""
    path = write(tmp_path, line() + "\n")
    argv = ["replay", path, "--json", "--write-policy", "write_back", "--page-size", "64",
            "--device-tokens", "4096", "--host-tokens", "6000", "--cp", "2"]
    assert main(argv) == EXIT_USAGE
    err = last_json(capsys.readouterr().out)["error"]
    assert err.startswith("--host-tokens: write_back keeps every evicted page's only copy on host")
    assert "93 host pages < 128 device pages (2 ranks x 64): at least 8192 host tokens" in err
    assert main(argv[:-4] + ["--host-tokens", "8192", "--cp", "2"]) == 0
    # replicated ranks (no sharding): the cache holds one rank's device pages
    from hicache.replay.driver import ReplayConfig
    ReplayConfig(cp=4, shard=False, write_policy="write_back", device_tokens=1024, host_tokens=1024, page_size=16)


# -- 3. tracebacks -----------------------------------------------------------------------

def test_deeply_nested_json_is_a_located_error(tmp_path):
    path = write(tmp_path, line() + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(TraceError, match=r":2: not JSON \(nested too deeply\)"):
        list(read_trace(path))


def test_an_integer_too_long_for_python_is_a_located_error(tmp_path):
    """int() refuses more than 4300 digits: json.loads raised a bare ValueError (no file, no
    line), and the CLI printed it as if a config field were wrong."""
    for bad in ('{"timestamp": 1' + "0" * 5000 + ', "input_length": 1, "output_length": 1, "hash_ids": [1]}',
                '{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1' + "0" * 5000 + ']}'):
        path = write(tmp_path, line() + "\n" + bad + "\n")
        with pytest.raises(TraceError) as exc:
            list(read_trace(path))
        assert str(exc.value) == f"{path}:2: not JSON (an integer of more than {sys.get_int_max_str_digits()} digits)"


def test_a_read_error_names_the_file_and_line(tmp_path, monkeypatch):
    """An OSError while reading (EIO) surfaced bare, naming neither the trace nor the line;
    the requests before it were already yielded and stay so."""
    if os.path.exists("/proc/self/mem"):       # a regular file whose read at offset 0 fails (EIO)
        with pytest.raises(TraceError) as exc:
            list(read_trace("/proc/self/mem"))
        assert str(exc.value) == "/proc/self/mem:1: cannot read (Input/output error)"
    import io
    from hicache.replay import trace as trace_mod

    class FailsOnLine3(io.BytesIO):
        def readline(self, *a):
            if self.tell() >= self.cut:
                raise OSError(5, "Input/output error")
            return super().readline(*a)
    path = write(tmp_path, (line(ts=1) + "\n" + line(ts=2) + "\n" + line(ts=3) + "\n"))
    data = open(path, "rb").read()
    f = FailsOnLine3(data)
    f.cut = len(line(ts=1)) + len(line(ts=2)) + 2
    monkeypatch.setattr(trace_mod, "open", lambda *a, **k: f, raising=False)
    got = []
    with pytest.raises(TraceError) as exc:
        got.extend(r.timestamp for r in read_trace(path))
    assert str(exc.value) == f"{path}:3: cannot read (Input/output error)" and got == [1, 2]


def test_json_errors_name_the_column(tmp_path):
    text = '{"timestamp": 0, "input_length": 600 "output_length": 1, "hash_ids": [1, 2]}'
    col = text.index('"output') + 1          # 38: where the comma should be
    path = write(tmp_path, line() + "\n" + text + "\n")
    with pytest.raises(TraceError) as exc:
        list(read_trace(path))
    assert str(exc.value) == f"{path}:2:{col}: not JSON (Expecting ',' delimiter)"
    path = write(tmp_path, line() + "\n" + "  \t" + text + "\n", "indented.jsonl")
    with pytest.raises(TraceError) as exc:       # the column in the line as written
        list(read_trace(path))
    assert str(exc.value) == f"{path}:2:{col + 3}: not JSON (Expecting ',' delimiter)"


@pytest.mark.parametrize("bad, key", [
    ('{"timestamp": 0, "input_length": 600, "input_length": 5, "output_length": 1, "hash_ids": [1, 2]}',
     "input_length"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1], "x": {"a": 1, "a": 2}}', "a"),
])
def test_a_key_given_twice_is_refused(tmp_path, capsys, bad, key):
    """json keeps the last of two equal keys: the line replayed with input_length 5, not 600,
    and nothing said so."""
    path = write(tmp_path, line() + "\n" + bad + "\n")
    msg = f"{path}:2: field {key!r} appears twice in one object (JSON would keep only the last)"
    with pytest.raises(TraceError) as exc:
        list(read_trace(path))
    assert str(exc.value) == msg
    assert main(["replay", path, "--json"]) == EXIT_USAGE
    assert last_json(capsys.readouterr().out)["error"] == msg


def test_an_overflowing_sweep_factor_is_refused_before_any_replay():
    with pytest.raises(ValueError, match=r"^sweep: factor 1e\+308 gives inf device tokens"):
        EvalConfig(cp=2, host_tokens=100_000, sweep=(1e308,))
    with pytest.raises(ValueError, match=r"^sweep: factor 1e\+16 gives"):
        EvalConfig(cp=2, device_tokens=2_000_000, host_tokens=100_000, sweep=(1e16,))


def test_capacities_beyond_memory_or_int64_name_the_field():
    with pytest.raises(ValueError) as exc:
        ReplayConfig(kv="small", device_tokens=10**15)
    msg = str(exc.value)
    assert msg.startswith("device_tokens: 1,000,000,000,000,000 tokens (kv small) need 32,000,000,000,000,000 bytes")
    assert "more than this machine's available memory" in msg
    with pytest.raises(ValueError, match="^host_tokens: must be a non-negative int that fits int64"):
        ReplayConfig(host_tokens=10**23)
    with pytest.raises(ValueError, match="^host_tokens: .* need .* bytes"):
        ReplayConfig(host_tokens=2**62)     # one state byte per host slot: 2**56 bytes
    ReplayConfig(kv="small", device_tokens=1_000_000)     # 32 MB: fine


def test_an_allocation_failure_is_reported_naming_the_capacities(monkeypatch):
    def refuse(self, storage=None):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")
    monkeypatch.setattr(ReplayConfig, "make_cache", refuse)
    with pytest.raises(ValueError, match=r"^device_tokens: cannot allocate the cache for device_tokens 65,536 .*"
                                         r"DefaultCPUAllocator: can't allocate memory"):
        replay_requests(ReplayConfig(kv="small", device_tokens=65_536), [])


def test_cli_names_the_flag_of_a_bad_capacity(capsys):
    assert main(["replay", SYN, "--host-tokens", "99999999999999999999999", "--json"]) == EXIT_USAGE
    assert last_json(capsys.readouterr().out)["error"].startswith("--host-tokens: must be a non-negative int")
    assert main(["replay", SYN, "--kv", "small", "--device-tokens", str(10**15), "--json"]) == EXIT_USAGE
    assert last_json(capsys.readouterr().out)["error"].startswith("--device-tokens: 1,000,000,000,000,000 tokens")


@pytest.fixture
def fake_bench(monkeypatch):
    """`hicache bench checker` running a stand-in that returns at once (`on_run` may act)."""
    from hicache.cli import bench
    mod = types.ModuleType("_fake_bench")
    mod.on_run = lambda args: None
    mod.run = lambda args: (mod.on_run(args), {"ours": 1, "ratio": 2.0})[1]
    monkeypatch.setitem(sys.modules, "_fake_bench", mod)
    monkeypatch.setitem(bench.BENCHES, "checker", "_fake_bench")
    return mod


def test_bench_out_that_cannot_be_written(tmp_path, capsys, fake_bench):
    # refused before the run: a missing folder, a directory
    for out in (tmp_path / "nodir" / "x.json", tmp_path):
        assert main(["bench", "checker", "--out", str(out), "--json"]) == EXIT_USAGE
        assert last_json(capsys.readouterr().out)["error"].startswith("--out: ")
    # fails at the write: the result is still printed, the failure named, exit non-zero
    target = tmp_path / "late.json"
    fake_bench.on_run = lambda args: target.mkdir()
    assert main(["bench", "checker", "--out", str(target), "--json"]) == 1
    out, err = capsys.readouterr()
    res = last_json(out)
    assert res["ratio"] == 2.0 and res["out_error"].startswith(f"{target}: ")
    assert "--out: cannot write" in err


@pytest.mark.parametrize("runs", ["0", "-3"])
def test_bench_runs_below_one_is_a_usage_error(capsys, fake_bench, runs):
    assert main(["bench", "checker", "--runs", runs, "--json"]) == EXIT_USAGE
    assert last_json(capsys.readouterr().out)["error"] == f"--runs: must be a positive int (repetitions), got {runs}"


# -- 4 and 11. the text summary shows storage failures and uncached requests -------------

def test_text_summary_names_storage_failures_and_uncached_requests(monkeypatch, capsys):
    from hicache.replay import driver
    real = driver.replay

    def failing(path, cfg, **kw):
        out = real(path, cfg, **kw)
        out["storage"] = {"set_fail": 12, "sets": 3}
        out["metrics"]["storage_backup_failures"] = 4
        out["uncached_requests"] = 2
        return out
    monkeypatch.setattr(driver, "replay", failing)
    assert main(["replay", SYN, "--limit", "5", "--host-tokens", "100000", "--storage", "memory"]) == 0
    text = capsys.readouterr().out
    assert "storage failures: set_fail 12, storage_backup_failures 4" in text
    assert "2 requests served uncached" in text


def test_evaluate_render_names_uncached_requests():
    big = evaluate(SYN, EvalConfig(page_size=512, cp=2, device_tokens=2_000_000, host_tokens=102_400, limit=5))
    assert big["setups"]["baseline"]["uncached_requests"] == 0 and "uncached" not in render(big)
    # 40 device pages: most of these long prompts do not fit, and were served uncached unsaid
    ev = evaluate(SYN, EvalConfig(page_size=512, cp=2, device_tokens=20_480, host_tokens=102_400, limit=5))
    n = ev["setups"]["baseline"]["uncached_requests"]
    assert n > 0 and f"requests served uncached (every device page locked): baseline {n}" in render(ev)


# -- 5. a host tier under one page -------------------------------------------------------

def test_a_host_tier_under_one_page_is_refused():
    for kw in ({"host_tokens": 10}, {"host_tokens": 10, "storage": "memory"}):
        with pytest.raises(ValueError, match="^host_tokens: must hold at least one page"):
            ReplayConfig(page_size=64, **kw)
    assert ReplayConfig(page_size=64, host_tokens=64).cache_config().host_pages == 1


# -- 7 and 8. encoding and empty traces --------------------------------------------------

def test_non_utf8_names_the_line_and_gzip_says_so(tmp_path):
    path = write(tmp_path, (line() + "\n").encode() * 2 + b'{"x": "\xff"}\n')
    with pytest.raises(TraceError, match=r":3: not UTF-8 \(byte 0xff at column 8\)$"):
        list(read_trace(path))
    gz = str(tmp_path / "t.jsonl.gz")
    with gzip.open(gz, "wt") as f:
        f.write(line() + "\n")
    with pytest.raises(TraceError) as exc:
        list(read_trace(gz))
    assert str(exc.value).startswith(f"{gz}:1: not UTF-8 (byte 0x8b") and "gzip-compressed" in str(exc.value)


def test_a_byte_order_mark_on_line_one_is_accepted(tmp_path):
    path = write(tmp_path, ("\ufeff" + line() + "\n" + line() + "\n").encode())
    assert len(list(read_trace(path))) == 2


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_a_trace_without_requests_is_an_error(tmp_path, capsys, text):
    path = write(tmp_path, text)
    with pytest.raises(TraceError, match=f"^no requests in {path}"):
        list(read_trace(path))
    assert main(["replay", path, "--json"]) == EXIT_USAGE
    assert last_json(capsys.readouterr().out)["error"].startswith(f"no requests in {path}")
    assert load_requests(SYN, 64, 1)   # a limit that stops early is not "no requests"


# -- 9 and 10. options -------------------------------------------------------------------

def test_plot_path_gets_png_and_a_directory_is_refused(tmp_path, capsys):
    from hicache.cli.replay import _plot_path
    assert _plot_path("out/myplot") == "out/myplot.png" and _plot_path("a.pdf") == "a.pdf"
    args = ["replay", SYN, "--limit", "20", "--page-size", "512", "--cp", "2", "--device-tokens", "20480",
            "--host-tokens", "102400", "--evaluate", "--sweep", "1", "--json"]
    assert main(args + ["--plot", str(tmp_path)]) == EXIT_USAGE
    assert last_json(capsys.readouterr().out)["error"] == \
        f"--plot: {tmp_path} is a directory; name the image file to write (OUT.PNG)"
    pytest.importorskip("matplotlib")
    assert main(args + ["--plot", str(tmp_path / "myplot")]) == 0
    assert last_json(capsys.readouterr().out)["plot"] == str(tmp_path / "myplot.png")
    assert (tmp_path / "myplot.png").read_bytes()[:4] == b"\x89PNG"


def test_evaluate_refuses_small_kv(capsys):
    assert main(["replay", SYN, "--evaluate", "--cp", "2", "--host-tokens", "100000", "--kv", "small",
                 "--json"]) == EXIT_USAGE
    assert last_json(capsys.readouterr().out)["error"].startswith("--kv small: --evaluate replays metadata-only")


def test_evaluate_under_verify_reports_what_the_monitors_checked(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hicache.cli", "replay", SYN, "--evaluate", "--cp", "2",
                           "--verify", "strict", "--limit", "20", "--page-size", "16", "--device-tokens", "2048",
                           "--host-tokens", "8192", "--violation-dir", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    v = last_json(proc.stdout)["verify"]
    assert (v["mode"], v["violations"]) == ("strict", 0)
    # (the baseline's device pages against CPSharding at CP = 1, the sharded cache's placement)
    assert [(m["spec"], m["what"]) for m in v["monitors"]["baseline"]] == [
        ("spec/HostTier.tla", None), ("spec/CPSharding.tla", "device pages, CP = 1")]
    assert [(m["spec"], m["what"]) for m in v["monitors"]["sharded"]] == [
        ("spec/HostTier.tla", None), ("spec/CPSharding.tla", "sharded placement")]
    assert all(m["checked"] == m["events"] > 0 for ms in v["monitors"].values() for m in ms)


def test_verify_without_a_host_tier_says_what_it_checked(tmp_path):
    """--cp without a host tier: CPSharding checks the placement (nothing was attached and
    the replay printed "no violation"); no sharding and no host tier: nothing to check, said
    so, not "no violation"."""
    def run(*extra):
        proc = subprocess.run([sys.executable, "-m", "hicache.cli", "replay", SYN, "--verify", "strict",
                               "--limit", "20", "--page-size", "16", "--device-tokens", "2048",
                               "--violation-dir", str(tmp_path), *extra], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout
    out = run("--cp", "2")
    assert "verify strict: no violation (spec/CPSharding.tla (sharded placement): " in out
    out = run()
    assert "verify strict: nothing to check (no host tier" in out and "no violation" not in out
