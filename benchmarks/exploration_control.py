"""Issue #7, experiment 2: svg0 with ``exploration`` = none / noisy / bootstrap / ucb on sparse continuous control.

Tasks: ``cartpole-swingup_sparse`` (action repeat 8) and ``ball_in_cup-catch`` (action repeat 4), the PlaNet repeats
used by benchmarks/dmc100k.py. Every variant gets the same environment-step budget and seeds, runs through
``train.py``'s Trainer (benchmarks/runs.py) with the settings in ``COMMON`` (smaller networks than svg0's default so
that 2 tasks x 4 variants x 3 seeds fit in about an hour on this 2-core machine), and is scored by its final
deterministic evaluation (10 episodes), the mean of its last 10 training returns and the first step at which any
training episode earned a reward above ``FIRST_REWARD`` (how soon exploration found the sparse reward).

    python benchmarks/exploration.py --experiment 2          # via the exploration benchmark (writes the JSON key)
    python benchmarks/exploration_control.py --steps 5000 --seeds 0 --tasks ball_in_cup-catch   # a quick look
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.runs import plot_curve_panels, train_and_read  # noqa: E402

TASKS = {"cartpole-swingup_sparse": 8, "ball_in_cup-catch": 4}
VARIANTS = ("none", "noisy", "bootstrap", "ucb")
COMMON = {"hidden": "128,128", "learning_starts": "250"}
FIRST_REWARD = 1.0
FIGURE = ROOT / "docs" / "img" / "exploration_sparse_control.png"


def _job(args) -> dict:
    task, repeat, variant, seed, steps = args
    with tempfile.TemporaryDirectory() as logdir:
        record = train_and_read(task, "svg0", seed, steps, {**COMMON, "exploration": variant}, Path(logdir),
                                action_repeat=repeat, eval_episodes=10)
    record["variant"] = variant
    first = [step for step, value in record["curve"] if value > FIRST_REWARD]
    record["first_rewarded_step"] = first[0] if first else None
    print(f"{task} {variant:9s} seed {seed}: eval {record['eval_return']:.1f} ({record['wall_s']:.0f} s)", flush=True)
    return record


def summarise(runs: list[dict]) -> dict:
    out: dict = {}
    for task in TASKS:
        for variant in VARIANTS:
            records = [r for r in runs if r["env"] == task and r["variant"] == variant]
            if not records:
                continue
            evals = [r["eval_return"] for r in records]
            finals = [float(np.mean([v for _, v in r["curve"][-10:]])) if r["curve"] else float("nan") for r in records]
            out.setdefault(task, {})[variant] = {
                "seeds": len(records), "eval_return_mean": float(np.mean(evals)), "eval_return_std": float(np.std(evals)),
                "final_train_return_mean": float(np.mean(finals)),
                "first_rewarded_step": [r["first_rewarded_step"] for r in records],
                "wall_s_mean": float(np.mean([r["wall_s"] for r in records]))}
    return out


def table(summary: dict) -> str:
    lines = ["| task | exploration | seeds | eval return | final train return | first rewarded step (per seed) "
             "| wall s |", "|---|---|---|---|---|---|---|"]
    for task, rows in summary.items():
        for variant, row in rows.items():
            first = ", ".join("-" if s is None else str(s) for s in row["first_rewarded_step"])
            lines.append(f"| {task} | {variant} | {row['seeds']} | {row['eval_return_mean']:.1f} ± "
                         f"{row['eval_return_std']:.1f} | {row['final_train_return_mean']:.1f} | {first} | "
                         f"{row['wall_s_mean']:.0f} |")
    return "\n".join(lines)


def plot(runs: list[dict], steps: int, path: Path = FIGURE) -> None:
    panels = {task: {variant: [r for r in runs if r["env"] == task and r["variant"] == variant]
                     for variant in VARIANTS} for task in TASKS}
    plot_curve_panels(panels, steps, path, bins=10)


def run_sparse_control(steps: int = 20_000, seeds=(0, 1, 2), tasks=tuple(TASKS), variants=VARIANTS,
                       workers: int = 2, on_run=None) -> dict:
    """All runs (in ``workers`` processes); ``on_run(result)`` is called with the partial result after each run."""
    jobs = [(task, TASKS[task], variant, seed, steps) for seed in seeds for task in tasks for variant in variants]
    runs: list[dict] = []
    result: dict = {}
    with mp.get_context("spawn").Pool(workers, maxtasksperchild=1) as pool:
        for record in pool.imap_unordered(_job, jobs):
            runs.append(record)
            result = {"protocol": {"steps": steps, "seeds": list(seeds), "tasks": {t: TASKS[t] for t in tasks},
                                   "variants": list(variants), "settings": COMMON, "eval_episodes": 10,
                                   "first_reward_threshold": FIRST_REWARD},
                      "machine": f"{platform.processor() or platform.machine()}, {mp.cpu_count()} cores, "
                                 f"{workers} worker processes, one torch thread each",
                      "summary": summarise(runs), "runs": runs}
            if on_run is not None:
                on_run(result)
    plot(runs, steps)
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    result = run_sparse_control(args.steps, args.seeds, args.tasks, args.variants, args.workers)
    print(json.dumps(result["summary"], indent=1))
    print(table(result["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
