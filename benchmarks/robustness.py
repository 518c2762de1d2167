"""Rare-event estimates for a trained controller (python -m pipelines robustness) against naive Monte Carlo: issue 17
part 2 applied to controllers (seed 003 Ch 5; the seed has no RL, so the claims are the seed's AMLS claims carried
over: agreement with naive MC where that is feasible, small spread over runs, and events beyond naive reach).

Subject: svg0 on walker-stand, 60k environment steps (trained here into ``--run-dir`` if it is not there; the run is
resumable). The start state is pinned after a 5 s warm-up of the policy from the reset (walker-stand resets to a random
pose; the policy first gets up). Perturbation model: ``envs.perturb.PerturbationModel`` (initial joint angles and
velocities with std 0.02, pushes on the torso every second for 0.1 s), failure = the torso sinks below 0.3 of its
starting height (on the ground) within 5 s.

Writes benchmarks/results/robustness.json, one entry per case with {claim, measured, holds}:
- ``moderate``: pushes of std ``--moderate-scale`` x body weight: AMLS (3 runs, N = 100, M = 5) against naive Monte
  Carlo (``--naive`` rollouts); holds when the mean log10 estimate is within max(0.15, 3 combined standard errors).
- ``rare``: pushes of std ``--rare-scale`` x body weight, AMLS only: the spread of log10 over runs and the rollouts
  spent, against the ~100 / P rollouts naive MC needs for a 10 % relative error.
- ``replay``: the worst case found reruns to the same score (determinism of s(x)).

    python benchmarks/robustness.py                 # ~40 minutes on one core (after the 60k-step training)
    python benchmarks/robustness.py --only rare     # rerun one case, keep the others
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.runs import fail, write_json  # noqa: E402
from envs.perturb import PerturbationModel  # noqa: E402
from inference.rare_events import amls, gaussian_model  # noqa: E402
from pipelines.robustness import PerturbedRollouts  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "robustness.json"
TRAIN_STEPS = 60_000
WARMUP, FALL_FRACTION, INIT_NOISE = 5.0, 0.3, 0.02


def ensure_run(run_dir: Path) -> None:
    """Train (or finish training) the subject run."""
    done = (run_dir / "checkpoints" / "latest").is_file() and json.loads(
        (run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip() / "state.json")
        .read_text())["counters"]["env_steps"] >= TRAIN_STEPS
    if done:
        return
    args = (["--resume", str(run_dir)] if (run_dir / "config.json").exists() else
            ["--env", "walker-stand", "--agent", "svg0", "--seed", "0", "--logdir", str(run_dir)])
    subprocess.run([sys.executable, str(ROOT / "train.py"), *args, "--steps", str(TRAIN_STEPS)], check=True)


def amls_runs(rollouts: PerturbedRollouts, runs: int, chains: int, mh_steps: int) -> dict:
    sample, log_density = gaussian_model(rollouts.dim)
    estimates, spent, worst = [], [], None
    for r in range(runs):
        before = rollouts.rollouts
        result = amls(sample, log_density, rollouts.score, n=chains, rho=0.1, mh_steps=mh_steps,
                      log_p_min=math.log(1e-12), generator=torch.Generator().manual_seed(r))
        estimates.append(result.log_probability / math.log(10) if result.log_probability > -math.inf else -math.inf)
        spent.append(rollouts.rollouts - before)
        top = int(torch.argmax(result.scores))
        if worst is None or float(result.scores[top]) > worst[1]:
            worst = (result.points[top].numpy().copy(), float(result.scores[top]))
        print(f"  AMLS run {r}: log10 P = {estimates[-1]:.3f}, {spent[-1]} rollouts", flush=True)
    finite = [e for e in estimates if e > -math.inf]
    return {"log10_runs": estimates, "rollouts_per_run": spent,
            "log10_mean": statistics.fmean(finite) if len(finite) == len(estimates) else None,
            "log10_std": statistics.pstdev(finite) if len(finite) == len(estimates) else None,
            "worst_case": worst}


def moderate_case(rollouts: PerturbedRollouts, runs: int, naive: int) -> dict:
    res = amls_runs(rollouts, runs, 100, 5)
    sample, _ = gaussian_model(rollouts.dim)
    fails = int((rollouts.score(sample(naive, torch.Generator().manual_seed(12345))) >= 0).sum())
    p = fails / naive
    naive_log10 = math.log10(p) if p > 0 else -math.inf
    # standard errors in log10: naive by the delta method, AMLS from the spread of its runs
    se_naive = math.sqrt((1 - p) / (p * naive)) / math.log(10) if p > 0 else math.inf
    se_amls = (res["log10_std"] or 0.0) / math.sqrt(runs)
    tolerance = max(0.15, 3 * math.hypot(se_naive, se_amls))
    holds = res["log10_mean"] is not None and p > 0 and abs(res["log10_mean"] - naive_log10) < tolerance
    res.pop("worst_case")
    return {"claim": "AMLS agrees with naive Monte Carlo where naive MC is feasible",
            "measured": {**res, "naive": {"rollouts": naive, "failures": fails, "log10": naive_log10,
                                          "log10_standard_error": se_naive}, "tolerance": tolerance},
            "holds": holds}


def rare_case(rollouts: PerturbedRollouts, runs: int) -> tuple[dict, tuple]:
    res = amls_runs(rollouts, runs, 100, 5)
    worst = res.pop("worst_case")
    mean = res["log10_mean"]
    needed = 100 / 10 ** mean if mean is not None else None
    holds = mean is not None and res["log10_std"] < 0.3 and needed > 10 * statistics.fmean(res["rollouts_per_run"])
    return ({"claim": "AMLS estimates an event beyond naive Monte Carlo's reach with a small spread over runs "
                      "(std of log10 < 0.3, at < 1/10 of the rollouts naive MC needs for a 10 % relative error)",
             "measured": {**res, "naive_rollouts_for_10_percent": needed}, "holds": holds}, worst)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", type=Path, default=ROOT / "runs" / "robustness" / "walker-stand-svg0")
    parser.add_argument("--moderate-scale", type=float, default=0.25)
    parser.add_argument("--rare-scale", type=float, default=0.15)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--naive", type=int, default=2000)
    parser.add_argument("--only", nargs="*", choices=("moderate", "rare"))
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.runs < 2 or args.naive < 100:
        fail("--runs must be >= 2 (the spread is reported) and --naive >= 100")
    torch.set_num_threads(1)
    ensure_run(args.run_dir)
    start = time.time()
    out = json.loads(args.output.read_text()) if args.only and args.output.exists() else {"cases": {}}
    cases = out["cases"]
    for name in ("moderate", "rare"):
        if args.only and name not in args.only:
            continue
        scale = args.moderate_scale if name == "moderate" else args.rare_scale
        rollouts = PerturbedRollouts(args.run_dir, PerturbationModel(push_scale=scale, init_noise=INIT_NOISE), "fall",
                                     None, FALL_FRACTION, 0, WARMUP)
        print(f"{name}: push scale {scale}, dim {rollouts.dim}", flush=True)
        if name == "moderate":
            cases[name] = moderate_case(rollouts, args.runs, args.naive)
        else:
            cases[name], worst = rare_case(rollouts, args.runs)
            replayed = rollouts.rollout(np.asarray(worst[0]))
            cases["replay"] = {"claim": "a saved case reruns to the same score (s(x) is deterministic)",
                               "measured": {"saved": worst[1], "replayed": replayed}, "holds": replayed == worst[1]}
        cases[name]["measured"]["push_scale"] = scale
        print(f"{name}: holds={cases[name]['holds']}", flush=True)
    out.update({"command": "python " + " ".join(["benchmarks/robustness.py", *sys.argv[1:]]),
                "subject": {"run_dir": str(args.run_dir.relative_to(ROOT)) if args.run_dir.is_relative_to(ROOT)
                            else str(args.run_dir), "env": "walker-stand", "agent": "svg0",
                            "train_steps": TRAIN_STEPS},
                "perturbation": f"envs.perturb.PerturbationModel (init_noise {INIT_NOISE}, a push every 1 s for "
                                "0.1 s, horizon 5 s) with the case's push_scale, from the state after a "
                                f"{WARMUP} s warm-up; failure: torso below {FALL_FRACTION} of its start height",
                "seconds": round(time.time() - start, 1)})
    write_json(args.output, out)


if __name__ == "__main__":
    main()
