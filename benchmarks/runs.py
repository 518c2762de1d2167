"""Training runs for the benchmarks: ``train.py``'s own Trainer, with the learning curve read back from TensorBoard."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np


def train_and_read(env: str, agent: str, seed: int, steps: int, overrides: dict[str, str], logdir: Path,
                   action_repeat: int = 1, eval_episodes: int = 5, tags: tuple[str, ...] = ()) -> dict:
    """One run exactly as ``train.py`` would do it; returns its training-return curve, final deterministic
    evaluation, wall time and the last value of each extra TensorBoard ``tags``."""
    import torch
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import agents
    from agents.loop import RunConfig, Trainer

    torch.set_num_threads(1)
    run = RunConfig(env=env, agent=agent, steps=steps, seed=seed, action_repeat=action_repeat, device="cpu",
                    logdir=str(logdir), eval_every=steps, eval_episodes=eval_episodes, checkpoint_every=steps,
                    log_every=1000)
    start = time.perf_counter()
    result = Trainer(run, agents.resolve_config(agent, overrides)).train()
    wall = time.perf_counter() - start
    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    scalars = events.Tags()["scalars"]
    curve = [(e.step, e.value) for e in events.Scalars("train/episode_return")] if "train/episode_return" in scalars \
        else []
    return {"env": env, "agent": agent, "seed": seed, "steps": steps, "action_repeat": action_repeat,
            "overrides": overrides, "curve": curve, "eval_return": result["eval_return"],
            "episodes": result["episodes"], "wall_s": wall,
            "last": {t: events.Scalars(t)[-1].value for t in tags if t in scalars}}


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
