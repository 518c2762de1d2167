"""train.py end to end: runs, logs, checkpoints, resumes (also after SIGKILL) and rejects bad input cleanly."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import ROOT

FAST = ["--set", "batch_size=8", "--set", "hidden=32,32", "--set", "learning_starts=50", "--eval-episodes", "1"]


@pytest.fixture
def cli_here(capsys):
    """train.py's main in this process (the checks of bad input need no fresh interpreter): a CompletedProcess."""
    import train

    def run(*args):
        status = train.main(list(map(str, args)))
        captured = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), status, captured.out, captured.err)
    return run


def scalars(run_dir):
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def assert_one_line_error(result, *fragments):
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_list_shows_environments_and_agents(cli):
    result = cli("--list")
    assert result.returncode == 0
    for name in ("cartpole-swingup", "walker-walk", "humanoid-run", "gym:Humanoid-v5", "svg0", "retrace_lambda"):
        assert name in result.stdout


def test_train_writes_events_checkpoint_config_and_resumes(cli, tmp_path):
    run_dir = tmp_path / "run"
    result = cli("--env", "cartpole-swingup", "--agent", "svg0", "--steps", 1200, "--action-repeat", 4,
                 "--logdir", run_dir, "--eval-every", 600, "--checkpoint-every", 600, *FAST)
    assert result.returncode == 0, result.stderr
    config = json.loads((run_dir / "config.json").read_text())
    assert config["run"]["env"] == "cartpole-swingup" and config["run"]["schedule"]["batch_size"] == 8
    assert config["agent"]["exploration"]["kind"] == "none" and "batch_size" not in config["agent"]
    assert config["agent"]["hidden"] == [32, 32]
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step-000001200"
    tags = scalars(run_dir)
    for tag in ("train/episode_return", "eval/return", "loss/critic", "loss/policy", "q/retrace_target_mean",
                "retrace/mean_c", "policy/entropy", "perf/env_steps_per_s", "perf/updates_per_s"):
        assert tag in tags, tag
    assert [s for s, _ in tags["eval/return"]] == [600, 1200]

    result = cli("--resume", run_dir, "--steps", 1600)
    assert result.returncode == 0, result.stderr
    assert "at step 1200" in result.stderr
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step-000001600"
    assert [s for s, _ in scalars(run_dir)["eval/return"]] == [600, 1200, 1600]  # the checkpoint step's kept


def test_resume_after_sigkill(tmp_path):
    run_dir = tmp_path / "killed"
    args = [sys.executable, str(ROOT / "train.py"), "--env", "cartpole-balance", "--agent", "svg0",
            "--steps", 100_000, "--logdir", run_dir, "--checkpoint-every", 200, "--eval-every", 100_000, *FAST]
    proc = subprocess.Popen(list(map(str, args)), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    latest = run_dir / "checkpoints" / "latest"
    deadline = time.time() + 240
    try:
        while time.time() < deadline:  # kill it once it has written at least two checkpoints, mid-training
            if latest.exists() and latest.read_text().strip() >= "step-000000400":
                break
            time.sleep(0.2)
        else:
            pytest.fail("no checkpoint appeared")
        time.sleep(0.3)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    saved = int(latest.read_text().strip().split("-")[1])
    result = subprocess.run([sys.executable, str(ROOT / "train.py"), "--resume", str(run_dir), "--steps",
                             str(saved + 200)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"at step {saved}" in result.stderr
    assert latest.read_text().strip() == f"step-{saved + 200:09d}"
    assert not list((run_dir / "checkpoints").glob("*.tmp-*"))


def test_unknown_environment_is_one_line(cli_here):
    result = cli_here("--env", "nope", "--agent", "svg0")
    assert_one_line_error(result, "unknown environment 'nope'")
    result = cli_here("--env", "cartpole-swingp", "--agent", "svg0")
    assert_one_line_error(result, "cartpole-swingup")


def test_unknown_agent_and_bad_settings_are_one_line(cli_here, tmp_path):
    assert_one_line_error(cli_here("--env", "cartpole-swingup", "--agent", "svg1"), "unknown agent", "svg0")
    assert_one_line_error(cli_here("--env", "cartpole-swingup", "--agent", "svg0", "--set", "batch_sise=3"),
                          "batch_size")
    assert_one_line_error(cli_here("--env", "cartpole-swingup", "--agent", "svg0", "--set", "batch_size=big"),
                          "batch_size expects int")
    assert_one_line_error(cli_here("--env", "cartpole-swingup", "--agent", "svg0", "--set", "discount=2"),
                          "discount")
    assert_one_line_error(cli_here("--env", "cartpole-swingup", "--agent", "svg0", "--set", "novalue"), "KEY=VALUE")
    assert_one_line_error(cli_here("--resume", tmp_path / "missing"), "not a run directory")
    assert not (tmp_path / "missing").exists()
    assert_one_line_error(cli_here("--resume", ROOT / "README.md"), "not a run directory")
    assert_one_line_error(cli_here("--env", "cartpole-swingup", "--agent", "svg0", "--seed", -1), "seed")
    assert_one_line_error(cli_here("--env", "cartpole-swingup", "--agent", "svg0", "--set", "replay_capacity=5"),
                          "replay_capacity")
    assert_one_line_error(cli_here("--env", "gym:FrozenLake-v1", "--agent", "svg0"), "cannot build")


def test_corrupt_checkpoint_is_one_line_and_left_untouched(cli_here, tmp_path):
    run_dir = tmp_path / "run"
    result = cli_here("--env", "cartpole-balance", "--agent", "svg0", "--steps", 200, "--logdir", run_dir,
                 "--eval-every", 1000, *FAST)
    assert result.returncode == 0, result.stderr
    model = run_dir / "checkpoints" / "step-000000200" / "model.safetensors"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model.write_bytes(bytes(data))
    assert_one_line_error(cli_here("--resume", run_dir), "corrupt")
    assert model.read_bytes() == bytes(data)  # nothing the user saved is rewritten
    (run_dir / "checkpoints" / "step-000000200" / "state.json").write_text("{not json")
    assert_one_line_error(cli_here("--resume", run_dir), "corrupt")
    # a foreign file posing as a checkpoint
    (run_dir / "checkpoints" / "step-000000200" / "state.json").write_text(json.dumps({"format": "other"}))
    assert_one_line_error(cli_here("--resume", run_dir), "not a probctl-checkpoint")


def test_existing_run_directory_is_never_overwritten(cli_here, tmp_path):
    run_dir = tmp_path / "run"
    assert cli_here("--env", "cartpole-balance", "--agent", "svg0", "--steps", 100, "--logdir", run_dir,
               *FAST).returncode == 0
    assert_one_line_error(cli_here("--env", "cartpole-balance", "--agent", "svg0", "--logdir", run_dir), "--resume")
