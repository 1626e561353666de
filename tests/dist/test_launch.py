"""The launcher's deadline is about progress, not total time: a run longer than the window
whose ranks keep reporting finishes; a rank that stops reporting is stopped, named."""
import time

import pytest

from hicache.dist.launch import PROGRESS_EVERY_S, LaunchError, launch
from hicache.dist.launch_check import PacedWork, failing_rank, paced_rank


def test_a_run_longer_than_the_window_finishes_while_ranks_report_progress():
    window = 2.0
    work = PacedWork(steps=5, step_s=PROGRESS_EVERY_S * 0.9)     # ~4.5 s of work, > the window
    t0 = time.monotonic()
    assert launch(paced_rank, 2, work, timeout_s=window, grace_s=2) == [0, 1]
    assert time.monotonic() - t0 > window


def test_a_rank_that_stops_reporting_is_stopped_and_named():
    work = PacedWork(steps=1, step_s=0.1, stall_s=60.0)
    t0 = time.monotonic()
    with pytest.raises(LaunchError) as info:
        launch(paced_rank, 2, work, timeout_s=2.0, grace_s=2)
    assert time.monotonic() - t0 < 30                     # stopped, well before the stall ends
    assert info.value.failures == {r: "no result, and no rank made progress for 2 s (killed)" for r in (0, 1)}


def test_a_failing_ranks_report_keeps_the_frames_where_it_raised():
    """The report used to keep the outermost frames (format_exc(limit=6)): an error raised
    deeper than that lost its location."""
    with pytest.raises(LaunchError) as info:
        launch(failing_rank, 1, 12, timeout_s=30.0, grace_s=2)
    report = info.value.failures[0]
    assert report.startswith("ValueError: raised 12 calls down on rank 0\n")
    assert 'raise ValueError(f"raised {depth} calls down on rank {rank}")' in report
