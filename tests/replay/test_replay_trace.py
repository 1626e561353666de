import json

import numpy as np
import pytest

from hicache.replay.driver import ReplayConfig
from hicache.replay.trace import TraceError, expand, read_trace, TraceRequest


def write(tmp_path, lines):
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


GOOD = json.dumps({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [7, 8]})


@pytest.mark.parametrize("bad, field", [
    ('{"timestamp": 0, "output_length": 1, "hash_ids": [1]}', "input_length"),
    ('{"timestamp": 0, "input_length": -3, "output_length": 1, "hash_ids": [1]}', "input_length"),
    ('{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": "x"}', "hash_ids"),
    ('{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [1, -2]}', "hash_ids"),
    ('{"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1]}', "hash_ids"),
    ('{"timestamp": "noon", "input_length": 3, "output_length": 1, "hash_ids": [1]}', "timestamp"),
])
def test_malformed_line_names_file_line_and_field(tmp_path, bad, field):
    path = write(tmp_path, [GOOD, "", bad])
    with pytest.raises(TraceError) as exc:
        list(read_trace(path))
    assert str(exc.value).startswith(f"{path}:3: ")
    assert repr(field) in str(exc.value)


def test_not_json_names_the_line(tmp_path):
    path = write(tmp_path, [GOOD, "{oops"])
    with pytest.raises(TraceError) as exc:
        list(read_trace(path))
    assert str(exc.value) == f"{path}:2:2: not JSON (Expecting property name enclosed in double quotes)"


def test_expand_derives_tokens_from_block_ids():
    req = TraceRequest(1, 0, 600, 5, (7, 8))
    toks = np.frombuffer(expand(req, 64), dtype="<i8")
    # 600 tokens = 9 whole pages of 64: 8 pages of block 7, 1 page of block 8
    assert len(toks) == 9 * 64
    assert toks[0] == 7 * 512 and toks[511] == 7 * 512 + 511 and toks[512] == 8 * 512
    assert toks[-1] == 8 * 512 + 63


@pytest.mark.parametrize("kwargs, field", [
    ({"page_size": 48}, "page_size"),
    ({"device_tokens": 10}, "device_tokens"),
    ({"storage": "file", "host_tokens": 0}, "host_tokens"),
    ({"storage": "tape"}, None),
])
def test_bad_replay_config(kwargs, field):
    with pytest.raises(ValueError) as exc:
        ReplayConfig(**kwargs)
    if field:
        assert str(exc.value).startswith(field + ":")
