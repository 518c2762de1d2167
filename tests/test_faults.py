"""Fault injection on train.py runs: concurrent trainers, signals, tampered or damaged run files, numeric blow-ups.

Each case asserts the exit status, the single ``error:`` line (or the interruption message), and that the last good
checkpoint is left as it was and still resumes. SIGKILL at any moment is tested in tests/test_cli.py.
"""
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import train
from agents.runlock import RunLock
from tests.conftest import ROOT
from tests.test_cli import FAST

BASE = ["--env", "cartpole-balance", "--agent", "svg0", "--eval-every", 100_000, *FAST]


def main(capsys, *args) -> tuple[int, list[str]]:
    """train.py in this process: (exit status, non-empty stderr lines)."""
    status = train.main(list(map(str, args)))
    return status, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def assert_error(capsys, args, *fragments):
    status, lines = main(capsys, *args)
    assert status == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def assert_error_after_progress(capsys, args, *fragments):
    """A run that trained a while: the progress bar is closed, then the error has a line of its own."""
    status = train.main(list(map(str, args)))
    err = capsys.readouterr().err
    last = err.replace("\r", "\n").strip().splitlines()[-1]
    assert status == 2 and last.startswith("error: ") and err.rstrip().endswith(last), err
    for fragment in fragments:
        assert fragment in last, last


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A run with a checkpoint at step 200; tests work on copies."""
    run_dir = tmp_path_factory.mktemp("faults") / "run"
    status = train.main(list(map(str, [*BASE, "--steps", 200, "--logdir", run_dir, "--checkpoint-every", 200])))
    assert status == 0
    return run_dir


@pytest.fixture
def run_copy(finished_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    return copy


def checkpoint_files(run_dir: Path) -> dict[str, bytes]:
    root = run_dir / "checkpoints"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def state_path(run_dir: Path) -> Path:
    return run_dir / "checkpoints" / "step-000000200" / "state.json"


def test_a_second_trainer_on_a_locked_run_directory_gets_one_line(capsys, run_copy):
    with RunLock(run_copy):   # a live trainer holds the directory
        assert_error(capsys, ["--resume", run_copy, "--steps", 400], "in use by another process", f"pid {os.getpid()}")
    # the holder's exit frees it, and a lock file left behind by a dead process is taken over
    (run_copy / ".lock").write_text('{"pid": 999999999, "host": "gone", "since": "then"}')
    status, lines = main(capsys, "--resume", run_copy, "--steps", 400)
    assert status == 0, lines
    assert (run_copy / "checkpoints" / "latest").read_text().strip() == "step-000000400"


@pytest.mark.parametrize("pointer", ["../../elsewhere/checkpoints/step-000000200", "/tmp/step-000000200",
                                     "step-000000200/../step-000000200", "step-2", "", "\udcff"])
def test_latest_must_name_a_checkpoint_of_this_run(capsys, run_copy, pointer):
    latest = run_copy / "checkpoints" / "latest"
    latest.write_bytes(pointer.encode("utf-8", "surrogateescape"))
    assert_error(capsys, ["--resume", run_copy, "--steps", 400], "latest")


def test_symbolic_links_in_checkpoints_are_refused(capsys, run_copy, finished_run):
    root = run_copy / "checkpoints"
    (root / "step-000000400").symlink_to(finished_run / "checkpoints" / "step-000000200")
    (root / "latest").write_text("step-000000400\n")
    assert_error(capsys, ["--resume", run_copy, "--steps", 600], "symbolic link")
    (root / "latest").unlink()
    (root / "latest").symlink_to(finished_run / "checkpoints" / "latest")
    assert_error(capsys, ["--resume", run_copy, "--steps", 600], "symbolic link")


STATE_TAMPERING = {
    "counter of the wrong type": (lambda s: s["counters"].update(episodes="x"), "counters.episodes"),
    "negative counter": (lambda s: s["counters"].update(actor_steps=-1), "counters.actor_steps"),
    "fractional step": (lambda s: s.update(step=200.5), "step"),
    "boolean counter": (lambda s: s["counters"].update(episodes=True), "counters.episodes"),
    "step not the directory's": (lambda s: s.update(step=400), "step 400"),
    "env_steps not the step": (lambda s: s["counters"].update(env_steps=100), "counters.env_steps"),
    "empty checksum map": (lambda s: s.update(sha256={}), "sha256"),
    "replay file not checksummed": (lambda s: s["sha256"].pop("replay.safetensors"), "sha256"),
    "skeleton names a missing tensor": (lambda s: s["agent_skeleton"]["__dict__"].append(
        ["extra", {"__tensor__": "/nowhere"}]), "/nowhere"),
    "replay counter of the wrong type": (lambda s: s["replay"].update(next_write_id="12"), "replay.next_write_id"),
}


@pytest.mark.parametrize("case", sorted(STATE_TAMPERING))
def test_state_json_fields_are_validated(capsys, run_copy, case):
    edit, fragment = STATE_TAMPERING[case]
    state = json.loads(state_path(run_copy).read_text())
    edit(state)
    state_path(run_copy).write_text(json.dumps(state))
    before = checkpoint_files(run_copy)
    assert_error(capsys, ["--resume", run_copy, "--steps", 400], fragment)
    assert checkpoint_files(run_copy) == before   # nothing the user saved is rewritten


@pytest.mark.parametrize("content", [b"\xff\xfe not utf-8", b"[" * 100_000 + b"]" * 100_000,
                                     b'{"format": "probctl-checkpoint", "version": 1, "step": NaN}'])
def test_undecodable_state_json_is_one_line(capsys, run_copy, content):
    state_path(run_copy).write_bytes(content)
    assert_error(capsys, ["--resume", run_copy, "--steps", 400], "state.json")


CONFIG_TAMPERING = {
    "steps as a string": (("run", "eval_every"), "x", "eval_every"),
    "negative interval": (("run", "checkpoint_every"), -5, "checkpoint_every"),
    "flag as a string": (("agent", "entropy_auto"), "no", "entropy_auto"),
    "fractional int": (("run", "schedule", "batch_size"), 8.5, "batch_size"),
    "schedule out of range": (("run", "schedule", "update_every"), 0, "update_every"),
    "section field as a string": (("agent", "exploration", "ensemble_size"), "five", "ensemble_size"),
    "learning rate out of range": (("agent", "policy_lr"), 1e39, "policy_lr"),
    "unknown agent": (("run", "agent"), "svg9", "svg9"),
}


@pytest.mark.parametrize("case", sorted(CONFIG_TAMPERING))
def test_config_json_fields_are_validated(capsys, run_copy, case):
    path, value, fragment = CONFIG_TAMPERING[case]
    config = json.loads((run_copy / "config.json").read_text())
    inner = config
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = value
    (run_copy / "config.json").write_text(json.dumps(config))
    assert_error(capsys, ["--resume", run_copy, "--steps", 400], "config.json", fragment)


def _replace_model(run_copy: Path, data: bytes) -> None:
    """Put ``data`` in place of the tensors and make the checksum agree, so only the reader stands in the way."""
    import hashlib

    model = run_copy / "checkpoints" / "step-000000200" / "model.safetensors"
    model.write_bytes(data)
    state = json.loads(state_path(run_copy).read_text())
    state["sha256"]["model.safetensors"] = hashlib.sha256(data).hexdigest()
    state_path(run_copy).write_text(json.dumps(state))


def test_truncated_tensors_are_one_line(capsys, run_copy):
    model = run_copy / "checkpoints" / "step-000000200" / "model.safetensors"
    _replace_model(run_copy, model.read_bytes()[:1000])
    assert_error(capsys, ["--resume", run_copy, "--steps", 400], "cannot read tensors")


class _Payload:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_a_pickle_payload_in_place_of_the_tensors_never_runs(capsys, run_copy, tmp_path):
    marker = tmp_path / "pwned"
    _replace_model(run_copy, pickle.dumps({"policy": _Payload(marker)}))
    assert_error(capsys, ["--resume", run_copy, "--steps", 400], "cannot read tensors")
    assert not marker.exists()


def test_numeric_settings_are_range_checked(capsys, tmp_path):
    assert_error(capsys, [*BASE, "--logdir", tmp_path / "a", "--set", "policy_lr=1e39"], "policy_lr", "(0, 1]")
    assert_error(capsys, [*BASE, "--logdir", tmp_path / "b", "--set", "entropy_coef=nan"], "entropy_coef")
    assert_error(capsys, [*BASE, "--logdir", tmp_path / "c", "--steps", 0], "steps")
    assert not any((tmp_path / d).exists() for d in "abc")


def test_a_diverging_update_keeps_the_last_checkpoint(capsys, run_copy, monkeypatch):
    from agents.svg0 import SVG0Agent as SVG0

    before = checkpoint_files(run_copy)

    def diverge(self, batch):
        raise RuntimeError("value cannot be converted to type float without overflow")
    monkeypatch.setattr(SVG0, "update", diverge)
    assert_error_after_progress(capsys, ["--resume", run_copy, "--steps", 600], "failed numerically",
                                "last checkpoint is intact")
    assert checkpoint_files(run_copy) == before

    monkeypatch.setattr(SVG0, "update", lambda self, batch: {"loss/critic": float("nan")})
    assert_error_after_progress(capsys, ["--resume", run_copy, "--steps", 600], "loss/critic", "non-finite")
    assert checkpoint_files(run_copy) == before
    monkeypatch.undo()   # the last good checkpoint still resumes
    assert train.main(["--resume", str(run_copy), "--steps", "300"]) == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_after_the_step_with_a_checkpoint(capsys, tmp_path, signum):
    run_dir = tmp_path / "run"
    args = [sys.executable, str(ROOT / "train.py"), *BASE, "--steps", 1_000_000, "--logdir", run_dir,
            "--checkpoint-every", 200]
    proc = subprocess.Popen(list(map(str, args)), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    latest = run_dir / "checkpoints" / "latest"
    try:
        deadline = time.time() + 240
        while not (latest.exists() and latest.read_text().strip() >= "step-000000200"):
            assert time.time() < deadline and proc.poll() is None, "no checkpoint appeared"
            time.sleep(0.2)
        if signum == signal.SIGTERM:   # while it runs, a second trainer on the same directory is refused
            second = subprocess.run([sys.executable, str(ROOT / "train.py"), "--resume", str(run_dir), "--steps",
                                     "2000000"], cwd=ROOT, capture_output=True, text=True, timeout=300)
            assert second.returncode == 2 and second.stderr.strip().startswith("error: "), second.stderr
            assert "in use by another process" in second.stderr and f"pid {proc.pid}" in second.stderr
        time.sleep(0.5)
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, stderr
    last = stderr.replace("\r", "\n").strip().splitlines()[-1]
    name = signal.Signals(signum).name
    assert last.startswith(f"stopped by {name} at step ") and "checkpoint written to" in last, stderr
    step = int(last.split(" at step ")[1].split(";")[0])
    assert latest.read_text().strip() == f"step-{step:09d}"   # the step it stopped at, not the last periodic one
    assert train.main(["--resume", str(run_dir), "--steps", str(step + 100)]) == 0
    assert f"at step {step}" in capsys.readouterr().err


@pytest.mark.parametrize("env, steps, stop", [("cartpole-balance", 1400, 732), ("jumping_ball-walk", 500, 230)])
def test_a_resumed_run_gives_the_numbers_of_an_uninterrupted_one(capsys, tmp_path, env, steps, stop):
    """Stopped mid-episode (and off the checkpoint schedule, as SIGTERM would) and resumed: the same episodes,
    losses and evaluations as a run that never stopped, because the episodes in progress are checkpointed."""
    from tests.test_cli import scalars

    common = ["--env", env, "--agent", "svg0", "--seed", 7, "--eval-every", 200, "--checkpoint-every", 100_000,
              "--action-repeat", 4 if env.startswith("cartpole") else 1, "--set", "log_every=200", *FAST]
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert train.main(list(map(str, [*common, "--steps", steps, "--logdir", whole]))) == 0
    assert train.main(list(map(str, [*common, "--steps", stop, "--logdir", parts]))) == 0
    state = json.loads(next((parts / "checkpoints").glob("step-*/state.json")).read_text())
    assert "episodes_in_progress" in json.dumps(state["agent_skeleton"])   # stopped mid-episode
    assert train.main(list(map(str, ["--resume", parts, "--steps", steps]))) == 0
    capsys.readouterr()
    expected, got = scalars(whole), scalars(parts)
    compared = [tag for tag in expected if not tag.startswith("perf/")]
    assert {"train/episode_return", "eval/return", "loss/critic", "loss/policy"} <= set(compared)
    for tag in compared:
        if not tag.startswith(("train/", "eval/", "replay/size")):
            # logged as means since the last log point: the stop at an odd step splits one such window
            split = min(step for step, _ in expected[tag] if step > stop)
            expected[tag] = [(step, v) for step, v in expected[tag] if step != split]
            got[tag] = [(step, v) for step, v in got[tag] if step != split]
            assert expected[tag], tag
        # the first part's own end-of-run log and evaluation, at the step it stopped
        got[tag] = [(step, v) for step, v in got[tag] if step != stop]
        assert got[tag] == expected[tag], tag


def test_what_a_kill_during_a_checkpoint_write_leaves_is_ignored_and_cleaned(capsys, run_copy):
    """SIGKILL while writing step-N leaves a half-written ``step-N.tmp-PID``; ``latest`` still names the last
    complete checkpoint, which resumes, and the next checkpoint removes the debris."""
    root = run_copy / "checkpoints"
    debris = root / "step-000000400.tmp-999999"
    debris.mkdir()
    (debris / "model.safetensors").write_bytes((root / "step-000000200" / "model.safetensors").read_bytes()[:500])
    status, lines = main(capsys, "--resume", run_copy, "--steps", 400)
    assert status == 0 and "at step 200" in lines[0], lines
    assert (root / "latest").read_text().strip() == "step-000000400"
    assert not debris.exists() and not list(root.glob("*.tmp-*"))
