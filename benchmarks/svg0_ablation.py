"""svg0 ablation: each learner ingredient of issue 12 switched off (or changed) from the defaults, on the PlaNet-100k
tasks and budget of benchmarks/dmc100k.py (same action repeats, same final 10-episode deterministic evaluation).

Resumable like dmc100k.py: finished runs are kept in the results file and skipped, an interrupted run continues from
its checkpoint, ``--hours H`` starts no new run after H hours.

    python benchmarks/svg0_ablation.py                                  # every variant, 6 tasks, 3 seeds
    python benchmarks/svg0_ablation.py --tasks cartpole-swingup --variants default no-layernorm --seeds 1

Writes benchmarks/results/svg0_ablation.json: ``summary[variant][task] = {mean_return, std_return, wall_s, seeds}``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.dmc100k import TASKS, run_svg0  # noqa: E402
from benchmarks.runs import fail, run_pool  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "svg0_ablation.json"

# each variant: the --set overrides applied to svg0's defaults
VARIANTS = {
    "default": {},
    "no-obs-norm": {"obs_norm": "false"},
    "no-layernorm": {"critic_norm": "none"},
    "one-critic": {"critics": "1"},
    "residual-critic": {"critic_norm": "residual"},
    "polyak-online-critic": {"target_tau": "0.005", "policy_critic": "online"},
    "thesis-width": {"hidden": "300,300"},
    "batch32": {"batch_size": "32"},
    "batch32-every2": {"batch_size": "32", "update_every": "2"},
    "before-issue12": {"obs_norm": "false", "critic_norm": "none", "critics": "1", "batch_size": "32",
                       "update_every": "2", "hidden": "300,300"},
}


def job(args: tuple) -> dict:
    import torch

    torch.set_num_threads(1)
    variant, task, seed, budget, run_root = args
    out = run_svg0(task, TASKS[task], seed, budget, VARIANTS[variant], Path(run_root) / variant)
    out.update(variant=variant, overrides=VARIANTS[variant], task=task, seed=seed, budget=budget)
    print(f"[ablation] {variant} {task} seed {seed}: return {out['return']:.1f}, {out['wall_s']:.0f} s", flush=True)
    return out


def summarise(runs: list[dict]) -> dict:
    import numpy as np

    table: dict = {}
    for r in runs:
        table.setdefault(r["variant"], {}).setdefault(r["task"], []).append(r)
    return {variant: {task: {"mean_return": float(np.mean([r["return"] for r in rs])),
                             "std_return": float(np.std([r["return"] for r in rs])),
                             "wall_s": float(np.mean([r["wall_s"] for r in rs])),
                             "seeds": sorted(r["seed"] for r in rs)} for task, rs in tasks.items()}
            for variant, tasks in table.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=int, default=100_000)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--hours", type=float, default=None, help="start no new run after this many hours")
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("--run-root", type=Path, default=ROOT / "runs" / "svg0_ablation")
    args = p.parse_args()
    if args.budget < 1 or args.seeds < 1 or args.workers < 1:
        fail("--budget, --seeds and --workers must be positive")
    os.environ.setdefault("MUJOCO_GL", "egl")
    result = json.loads(args.output.read_text()) if args.output.exists() else {"runs": []}
    if result.get("budget", args.budget) != args.budget:
        fail(f"{args.output} holds a {result['budget']}-step ablation; pass --output elsewhere")
    done = {(r["variant"], r["task"], r["seed"]) for r in result["runs"] if r["overrides"] == VARIANTS[r["variant"]]}
    wanted = [(v, t, s) for s in range(args.seeds) for t in args.tasks for v in args.variants]
    jobs = [(v, t, s, args.budget, str(args.run_root)) for v, t, s in wanted if (v, t, s) not in done]
    result.update(budget=args.budget, variants=VARIANTS,
                  command="python " + " ".join(["benchmarks/svg0_ablation.py", *sys.argv[1:]]))
    print(f"[ablation] {len(wanted) - len(jobs)} of {len(wanted)} runs already finished", flush=True)
    def finished(run: dict) -> None:
        result["runs"].append(run)
        result["summary"] = summarise([r for r in result["runs"] if r["overrides"] == VARIANTS[r["variant"]]])
        args.output.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.output.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, args.output)

    run_pool(job, jobs, args.workers, args.hours, finished, "ablation")
    print(json.dumps(result.get("summary", {}), indent=1))


if __name__ == "__main__":
    main()
