"""Tracking experts (pipelines/npmp/experts.py, seed 000 §8.1): svg0 runs per snippet fanned out on a local Ray
cluster, resumed to more steps, skipped when done, and scored against the reference's kinematic playback."""
import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.config import ConfigError
from envs import EnvError
from envs.mocap.tracking import MAX_COMIC_REWARD
from cluster import ClusterError, fanout
from pipelines.npmp import experts

SNIPPETS = ["09_02-0", "16_45-0"]   # two of the shortest snippets (36 and 38 frames)
TINY = ["hidden=16,16", "learning_starts=20", "batch_size=4", "replay_capacity=2000", "eval_episodes=1",
        "eval_every=100000", "checkpoint_every=100000"]


def checkpoints(run_dir):
    return sorted(p.name for p in (run_dir / "checkpoints").glob("step-*"))


@pytest.fixture
def local_ray():
    import ray

    from cluster import connect_ray

    connect_ray(None, 2)
    yield
    ray.shutdown()


@pytest.mark.slow   # ~30 s: trains, resumes and skips svg0 experts (the planner experts are the default now)
def test_train_resume_skip_and_report(tmp_path, local_ray):
    root = tmp_path / "experts"
    first = experts.train_experts(SNIPPETS, root, steps=150, overrides=TINY)
    assert [r["snippet"] for r in first] == SNIPPETS
    assert [r["status"] for r in first] == ["new", "new"] and all(r["env_steps"] == 150 for r in first)
    for snippet in SNIPPETS:
        config = json.loads((root / snippet / "config.json").read_text())
        assert config["run"]["env"] == f"humanoid-track-residual:{snippet}" and config["agent"]["hidden"] == [16, 16]
        assert checkpoints(root / snippet) == ["step-000000150"]
        assert (root / f"{snippet}.log").stat().st_size > 0   # the trainer's progress went to the log

    more = experts.train_experts(SNIPPETS, root, steps=300, overrides=TINY)
    assert [(r["status"], r["env_steps"]) for r in more] == [("resumed", 300)] * 2
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == SNIPPETS   # continued in place
    for snippet in SNIPPETS:
        assert checkpoints(root / snippet)[-1] == "step-000000300"
        assert experts.checkpoint_steps(root / snippet) == 300

    again = experts.train_experts(SNIPPETS, root, steps=300)
    assert [(r["status"], r["env_steps"]) for r in again] == [("skipped", 300)] * 2

    # a resumed run keeps its settings: a different --set is refused before any training
    with pytest.raises(ConfigError, match="hidden"):
        experts.train_expert(SNIPPETS[0], root, 400, overrides={"hidden": "32,32"})
    with pytest.raises(ConfigError, match="update_every"):   # a schedule setting is compared with the saved schedule
        experts.train_expert(SNIPPETS[0], root, 400, overrides={"schedule.update_every": "2"})
    with pytest.raises(ConfigError, match="not an expert"):
        experts.train_expert(SNIPPETS[0], root, 400, family="humanoid-track-time")

    # a run killed before its first checkpoint starts again from step 0 with its saved config (in this process)
    killed = tmp_path / "killed" / SNIPPETS[0]
    killed.mkdir(parents=True)
    (killed / "config.json").write_text((root / SNIPPETS[0] / "config.json").read_text())
    restarted = experts.train_expert(SNIPPETS[0], killed.parent, 30, overrides={"hidden": "16,16"})
    assert (restarted["status"], restarted["env_steps"]) == ("restarted", 30) and checkpoints(killed) == ["step-000000030"]

    report = experts.expert_report(root, episodes=2, use_ray=True)
    assert [r["snippet"] for r in report] == SNIPPETS
    for r in report:
        assert r["env_steps"] == 300 and r["episodes"] == 2
        assert 0.0 <= r["relative_return"] <= 1.05
        assert r["relative_return"] == pytest.approx(r["return"] / r["reference_return"])
        # the reference return is what kinematic playback scores: the maximum on each step of a full episode
        assert r["reference_return"] == pytest.approx(r["playback_return"], rel=1e-6)
        assert r["reference_return"] == pytest.approx(MAX_COMIC_REWARD * r["full_steps"])
        assert r["full_steps"] == {"09_02-0": 36, "16_45-0": 38}[r["snippet"]] - 6   # ends max(ref_steps)+1 early
        assert 1 <= r["mean_steps"] <= r["full_steps"]
        assert r["mean_seconds"] == pytest.approx(0.03 * r["mean_steps"])
        assert 0.0 <= r["termination_fraction"] <= 1.0
        # an episode that is not terminated runs the whole snippet
        assert r["termination_fraction"] > 0 or r["mean_steps"] == r["full_steps"]
    assert "mean relative return" in experts.format_report(report)

    # the command, in this process (no Ray), for one expert; the JSON matches the Ray report (deterministic)
    out = tmp_path / "report.json"
    assert run("report-experts", "--root", str(root), "--snippets", SNIPPETS[0], "--episodes", "2",
               "--out", str(out)) == 0
    assert json.loads(out.read_text()) == [pytest.approx(report[0])]


def test_failing_item_is_named_and_others_complete(capsys):
    import ray

    with pytest.raises(fanout.FanOutError) as caught:
        fanout.on_ray(experts.reference_score, ["09_02-0", "no_such_snippet"], num_cpus=2)
    error = caught.value
    assert list(error.failures) == ["no_such_snippet"]
    assert "EnvError" in error.failures["no_such_snippet"] and "unknown snippet" in error.failures["no_such_snippet"]
    assert error.results[0]["full_steps"] == 30 and error.results[1] is None
    progress = capsys.readouterr().err
    assert "no_such_snippet FAILED" in progress and "09_02-0 done" in progress
    assert not ray.is_initialized()   # the local cluster it started is shut down


def test_process_fan_out_has_the_same_contract(capsys):
    # for a machine without Ray: fresh spawned processes, results in item order, failures named
    with pytest.raises(fanout.FanOutError) as caught:
        fanout.fan_out(experts.reference_score, ["no_such_snippet", "09_02-0"], processes=2)
    error = caught.value
    assert list(error.failures) == ["no_such_snippet"] and "unknown snippet" in error.failures["no_such_snippet"]
    assert error.results[0] is None and error.results[1]["full_steps"] == 30
    assert "no_such_snippet FAILED" in capsys.readouterr().err
    assert fanout.on_processes(experts.reference_score, [], 2) == []


def cli(*argv, default_snippets=None):
    parser = argparse.ArgumentParser()
    experts.add_experts_parser(parser.add_subparsers(dest="command", required=True), default_snippets)
    return parser.parse_args(argv)


def run(*argv):
    return experts.run_experts(cli(*argv))


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert run("experts", "--snippets", "07_01-0", "09_01", "--steps", "100", "--root", str(tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown snippet(s) 09_01") and "\n" not in err
    assert run("experts", "--steps", "100", "--root", str(tmp_path)) == 2
    assert "--snippets" in capsys.readouterr().err
    assert cli("experts", "--steps", "1", default_snippets=["07_01-0"]).snippets == ["07_01-0"]
    assert run("report-experts", "--root", str(tmp_path / "missing")) == 2
    assert capsys.readouterr().err.strip() == f"error: no experts directory {tmp_path / 'missing'}"
    with pytest.raises(EnvError, match="unknown snippet"):
        experts.check_snippets(["07_01-0", "nope"])
    with pytest.raises(EnvError, match="more than once"):
        experts.train_experts(["07_01-0", "09_01-0", "07_01-0"], tmp_path, 100)
    with pytest.raises(ClusterError, match="num_cpus"):
        experts.train_experts(["07_01-0"], tmp_path, 100, address="auto", num_cpus=2)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_process_fan_out_workers_end_with_a_killed_caller(signum):
    # a collection killed by hand must not leave its workers planning on as orphans (they held the cores before)
    script = "import time; from cluster import fanout; fanout.on_processes(time.sleep, [120, 120], 2)"
    caller = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[1])
    try:
        deadline = time.monotonic() + 60
        while len(workers := _children(caller.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(workers) >= 2, "the pool's workers did not start"
        time.sleep(2)   # let them run their initializer
        workers = _children(caller.pid)
        caller.send_signal(signum)
        caller.wait(30)
        deadline = time.monotonic() + 30
        while [pid for pid in workers if _alive(pid)] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in workers if _alive(pid)]
    finally:
        caller.kill()


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status   # a zombie has ended; only its parent's wait is missing
