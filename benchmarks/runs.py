"""Training runs for the benchmarks: ``train.py``'s own Trainer, with the learning curve read back from TensorBoard."""
from __future__ import annotations

import json
import math
import os
import signal
import time
from pathlib import Path

import numpy as np

from cluster.fanout import Terminated, caller_bound_pool


def train_and_read(env: str, agent: str, seed: int, steps: int, overrides: dict[str, str], logdir: Path,
                   action_repeat: int = 1, eval_episodes: int = 5, tags: tuple[str, ...] = (),
                   checkpoint_every: int | None = None) -> dict:
    """One run exactly as ``train.py`` would do it; returns its training-return curve, final deterministic
    evaluation, wall time, and the last value (``last``) and whole series (``series``) of each extra TensorBoard
    ``tags``. With ``checkpoint_every`` (environment steps) a long run checkpoints as it goes, and a run that was
    stopped (SIGTERM checkpoints too) continues from its last checkpoint in ``logdir`` instead of starting again;
    ``wall_s`` then counts this process's part only, and ``resumed_from`` says where it took over."""
    import torch
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import agents
    from agents import checkpoint
    from agents.loop import RunConfig, Trainer

    torch.set_num_threads(1)
    config, schedule = agents.resolve(agent, overrides)
    run = RunConfig(env=env, agent=agent, steps=steps, seed=seed, action_repeat=action_repeat, device="cpu",
                    logdir=str(logdir), eval_every=steps, eval_episodes=eval_episodes,
                    checkpoint_every=checkpoint_every or steps, log_every=1000, schedule=schedule)
    resume = None
    if checkpoint_every and (logdir / "checkpoints" / "latest").is_file():
        resume = checkpoint.latest(logdir / "checkpoints")
    start = time.perf_counter()
    result = Trainer(run, config, resume).train()
    wall = time.perf_counter() - start
    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    scalars = events.Tags()["scalars"]
    curve = [(e.step, e.value) for e in events.Scalars("train/episode_return")] if "train/episode_return" in scalars \
        else []
    return {"env": env, "agent": agent, "seed": seed, "steps": steps, "action_repeat": action_repeat,
            "overrides": overrides, "curve": curve, "eval_return": result["eval_return"],
            "episodes": result["episodes"], "wall_s": wall,
            **({"resumed_from": resume.name} if resume is not None else {}),
            "last": {t: events.Scalars(t)[-1].value for t in tags if t in scalars},
            "series": {t: [(e.step, e.value) for e in events.Scalars(t)] for t in tags if t in scalars}}


def read_series(logdir: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) of one TensorBoard scalar of a finished run directory ([] if it never logged it)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)] if tag in events.Tags()["scalars"] else []


def steps_to_threshold(curve: list, threshold: float, window: int) -> int | None:
    """The first step at which the mean of the last ``window`` training returns reaches ``threshold``."""
    returns = [r for _, r in curve]
    for i in range(len(curve)):
        if i + 1 >= min(window, len(curve)) and np.mean(returns[max(0, i + 1 - window):i + 1]) >= threshold:
            return int(curve[i][0])
    return None


def binned_curves(records: list[dict], steps: int, bins: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """(bin ends, [runs, bins] mean training return per bin, NaN where a run had no episode in a bin)."""
    edges = np.linspace(0, steps, bins + 1)
    rows = []
    for record in records:
        if not record["curve"]:
            continue
        x, y = np.array(record["curve"]).T
        idx = np.digitize(x, edges)
        rows.append([y[idx == i].mean() if (idx == i).any() else np.nan for i in range(1, len(edges))])
    return edges[1:], np.array(rows)


def plot_curve_panels(panels: dict[str, dict[str, list[dict]]], steps: int, path: Path, bins: int = 20) -> None:
    """One panel per title, one line per label: the mean over runs of the binned training return, with the range
    over runs shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    for ax, (title, lines) in zip(axes[0], panels.items()):
        for label, records in lines.items():
            x, curves = binned_curves(records, steps, bins)
            if len(curves):
                ax.plot(x, np.nanmean(curves, 0), label=f"{label} ({len(curves)} seeds)")
                ax.fill_between(x, np.nanmin(curves, 0), np.nanmax(curves, 0), alpha=0.2)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("environment steps")
        ax.set_ylabel("training episode return")
        if lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _json_safe(value):
    """JSON has no NaN or infinity: such a float (e.g. the middle of an episode too short to have one) becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_json(path: Path, data: dict) -> None:
    """Written to a temporary file and renamed, so an interrupted write never leaves a truncated results file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_json_safe(data), indent=1, allow_nan=False))
    os.replace(tmp, path)


def save_results(path: Path, results: dict) -> None:
    """Write a resumable benchmark's ``results`` (``resumed_results``) to ``path`` without losing what another
    process measuring into the same file wrote since this one read it: under a lock on the folder, whatever the file
    holds now that ``results`` lacks is added to ``results`` (in place, so the rows a caller holds stay in it), then
    the whole is written (``write_json``). Where both hold a value, this process's own wins."""
    import fcntl

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        try:
            on_file = json.loads(path.read_text()) if path.is_file() else {}
        except json.JSONDecodeError:   # writes are atomic: only someone else's editing leaves this; ours replaces it
            on_file = {}
        _add_missing(results, on_file)
        write_json(path, results)
    finally:
        os.close(folder)   # and with it the lock


def _add_missing(into: dict, other: dict) -> None:
    for key, value in other.items():
        if key not in into:
            into[key] = value
        elif isinstance(into[key], dict) and isinstance(value, dict):
            _add_missing(into[key], value)


def run_jobs(job, jobs: list[tuple], workers: int, runs: dict, results_path: Path, header: dict,
             again: frozenset = frozenset()) -> None:
    """``job(args) -> (key, record)`` for each of ``jobs`` (``args[0]`` is the key) not yet in ``runs``, or in
    ``again`` (recorded runs to make anew: each record is kept until its new one replaces it), in ``workers`` fresh
    processes; ``results_path`` is rewritten after every finished run, so a long benchmark can be interrupted and
    rerun without losing finished runs. A run that raises is reported on a line and stays as it was."""
    todo = [j for j in jobs if j[0] not in runs or j[0] in again]
    if not todo:
        return

    def finished(result: tuple[str, dict]) -> None:
        key, record = result
        runs[key] = record
        write_json(results_path, {**header, "runs": runs})

    run_pool(job, todo, workers, None, finished, results_path.stem)


def run_pool(job, jobs: list[tuple], workers: int, hours: float | None, on_result, label: str) -> None:
    """``on_result(job(args))`` for each of ``jobs``, in ``workers`` fresh processes; no job starts after ``hours``
    (None: no limit), those running finish. A job that raises is reported on a line and the others go on."""
    deadline = None if hours is None else time.time() + 3600 * hours
    pending = iter(jobs)
    try:
        _run_in_pool(job, pending, workers, deadline, on_result, label)
    except Terminated:   # the pool's workers are stopped; finished runs are kept, a rerun goes on
        print(f"[{label}] stopped by SIGTERM; the runs in progress were stopped, finished ones are kept: "
              "rerun the same command to go on", flush=True)
        raise SystemExit(128 + signal.SIGTERM) from None


def _run_in_pool(job, pending, workers: int, deadline: float | None, on_result, label: str) -> None:
    with caller_bound_pool(workers) as pool:
        running = []
        while True:
            while len(running) < workers and (deadline is None or time.time() < deadline):
                nxt = next(pending, None)
                if nxt is None:
                    break
                running.append(pool.apply_async(job, (nxt,)))
            if not running:
                return
            time.sleep(2)
            for handle in [h for h in running if h.ready()]:
                running.remove(handle)
                try:
                    result = handle.get()
                except Exception as e:  # the run stays missing; a rerun tries it again
                    print(f"[{label}] a run failed: {e.__class__.__name__}: {e}", flush=True)
                    continue
                on_result(result)


class Strip:
    """An episode drawn as one PNG: called with (env, steps so far) after every step (``observe`` of
    ``imitate_reference``), it keeps the walker's back camera every ``every`` steps (default: every second of the
    env's control timestep) and at the episode's end; ``write`` puts them side by side."""

    def __init__(self, every: int | None = None):
        self.every, self.frames, self.last, self.steps = every, [], None, 0

    def __call__(self, env, steps: int) -> None:
        self.every = self.every or env.metadata["render_fps"]   # envs.dmc: control steps per second
        self.last, self.steps = env.render(), steps
        if steps % self.every == 0:
            self.frames.append(self.last)

    def write(self, path: Path) -> None:
        import imageio.v3 as iio

        frames = self.frames + ([self.last] if self.steps % self.every else [])
        path.parent.mkdir(parents=True, exist_ok=True)
        iio.imwrite(path, np.concatenate(frames, axis=1))


def fail(message: str) -> None:
    """Bad input to a benchmark script: one ``error:`` line on stderr and exit status 2."""
    import sys

    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def resumed_results(path: Path, script: str, argv: list[str] | None, **fields) -> dict:
    """A resumable benchmark's results: what ``path`` already holds (``fail`` if it is not JSON), with this
    invocation's command line (``script`` is the benchmark's file name), today's date and ``fields`` on top; written
    back with ``save_results``."""
    import datetime
    import json
    import sys

    try:
        kept = json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError as e:
        fail(f"{path} is not a results file ({e}); move it away to start afresh")
    command = " ".join(["python", f"benchmarks/{script}", *(argv if argv is not None else sys.argv[1:])])
    return {**kept, "command": command, "date": datetime.date.today().isoformat(), **fields}
