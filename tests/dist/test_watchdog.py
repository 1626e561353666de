"""The watchdog ends a rank stuck inside one step, naming the step (never a silent hang)."""
import subprocess
import sys
import textwrap


def test_watchdog_exits_a_stuck_rank_naming_the_step():
    script = textwrap.dedent("""
        import threading
        from hicache.dist.comm import Watchdog
        wd = Watchdog(rank=3, limit_s=0.3)
        with wd.step("pp_sync#7"):
            threading.Event().wait(30)      # stuck: never leaves the step
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 70
    assert "watchdog: rank 3 stuck in step 'pp_sync#7'" in proc.stderr


def test_watchdog_leaves_finished_steps_alone():
    script = textwrap.dedent("""
        import threading
        from hicache.dist.comm import Watchdog
        wd = Watchdog(rank=0, limit_s=0.3)
        for i in range(3):
            with wd.step(f"s{i}"):
                pass
        threading.Event().wait(0.8)         # idle between steps is not a stall
        wd.close()
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok"
