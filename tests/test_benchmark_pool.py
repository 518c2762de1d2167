"""The benchmarks' process pool (benchmarks/runs.py ``run_pool``): stopping the parent stops its workers."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    sys.path.insert(0, {root!r})
    from benchmarks.runs import run_pool

    def job(args):
        Path(args[0]).write_text(str(os.getpid()))
        time.sleep(300)

    if __name__ == "__main__":
        out = Path({out!r})
        run_pool(job, [(str(out / "a"),), (str(out / "b"),), (str(out / "c"),)], 2, None, print, "pool-test")
""")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_sigterm_to_the_parent_stops_the_workers_and_says_how_to_go_on(tmp_path):
    script = tmp_path / "pool.py"
    script.write_text(SCRIPT.format(root=str(ROOT), out=str(tmp_path)))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        deadline = time.time() + 120
        while not ((tmp_path / "a").exists() and (tmp_path / "b").exists()) and time.time() < deadline:
            time.sleep(0.2)
        pids = [int((tmp_path / name).read_text()) for name in ("a", "b")]
        assert all(alive(pid) for pid in pids)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in output and "rerun the same command" in output
    deadline = time.time() + 20
    while any(alive(pid) for pid in pids) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(alive(pid) for pid in pids), "a worker outlived its parent"
    assert not (tmp_path / "c").exists(), "no new run starts after the signal"
    for pid in pids:   # belt and braces: never leave a sleeping worker behind a failed test
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_long_benchmark_run_that_was_stopped_continues_from_its_checkpoint(tmp_path):
    """``train_and_read(..., checkpoint_every=)``: a run with a checkpoint in its directory continues from it (as a
    rerun of a benchmark does after the run was stopped) and says so."""
    from benchmarks.runs import train_and_read

    settings = {"hidden": "16,16", "learning_starts": "50", "batch_size": "16"}
    run = dict(action_repeat=8, checkpoint_every=1000)   # one 1 000-step episode per 1 000 steps
    first = train_and_read("cartpole-swingup", "svg0", 0, 1000, settings, tmp_path / "run", **run)
    assert "resumed_from" not in first and [s for s, _ in first["curve"]] == [1000]
    again = train_and_read("cartpole-swingup", "svg0", 0, 2000, settings, tmp_path / "run", **run)
    assert again["resumed_from"] == "step-000001000"
    assert [s for s, _ in again["curve"]] == [1000, 2000]   # the first episode kept, the second run on from it


def test_two_processes_measuring_into_one_results_file_keep_each_others_rows(tmp_path):
    """save_results: each writer read the file before the other wrote (they wait for each other); neither's rows are
    lost, and a writer's own value wins where both hold one. Real processes, each writing many times."""
    import json

    results = tmp_path / "results.json"
    results.write_text(json.dumps({"rows": {"kept": {"0": 1}}, "command": "before"}))
    writer = textwrap.dedent(f"""
        import sys
        import time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from pathlib import Path
        from benchmarks.runs import resumed_results, save_results
        name = sys.argv[1]
        path = Path({str(results)!r})
        results = resumed_results(path, "x.py", [name])
        (path.parent / name).touch()   # read: wait until the other has read too
        while not all((path.parent / other).exists() for other in "ab"):
            time.sleep(0.01)
        rows = results["rows"].setdefault(name, {{}})
        for i in range(40):
            rows[str(i)] = i
            save_results(path, results)
        results["rows"]["kept"]["0"] = name   # both overwrite one value: the last writer's stays
        save_results(path, results)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", writer, name]) for name in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    final = json.loads(results.read_text())
    assert final["rows"]["a"] == final["rows"]["b"] == {str(i): i for i in range(40)}
    assert final["rows"]["kept"]["0"] in ("a", "b") and final["command"] in ("python benchmarks/x.py a",
                                                                              "python benchmarks/x.py b")
