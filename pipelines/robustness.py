"""How rarely does a trained controller fail? Rare-event estimates with AMLS (seed 003 Ch 5) over perturbed rollouts.

    python -m pipelines robustness RUN_DIR                         # P(fall) under the default perturbation model
    python -m pipelines robustness RUN_DIR --failure return --threshold 200
    python -m pipelines robustness RUN_DIR --naive 2000            # also naive Monte Carlo, as a check
    python -m pipelines robustness RUN_DIR --replay OUT/cases.json --case 0   # rerun one found case, with video

The input model x ~ N(0, I) and the deterministic rollout it drives are ``envs.perturb.PerturbationModel``: initial
joint angles and velocities, and pushes on the root body, every other source of randomness pinned. The failure score
s(x) >= 0 exactly when the rollout fails:

- ``fall``: s = max_t (f h_0 - h_t) / h_0, h_t the height of the root body (torso) after agent step t, h_0 its
  height at the start, f = ``--fall-fraction`` (default 0.5: the torso sank to half its starting height);
- ``return``: s = threshold - (the rollout's return): the controller earned no more than ``--threshold``.

AMLS (``inference.rare_events.amls``) estimates I = P(s(X) >= 0) with ``--chains`` N, ``--rho`` and ``--mh-steps`` M
per level, repeated ``--runs`` times with independent generators: the report gives log10 I of every run, their mean
and spread. An event rarer than ``--p-min`` ends a run with I = 0 (log10 = -inf). The last level's points, the
failures found (or the nearest misses, if none), are saved as replayable cases: ``cases.json`` holds each x and its
score, ``--replay`` reruns one, checks that it reproduces its score, and writes a GIF.
Each s(x) is one rollout, so a run costs about N (1 + levels x M) rollouts; the report says how many.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from agents import checkpoint
from agents.config import ConfigError
from agents.loop import load_run_config, load_trained_agent, make_run_env
from agents.observations import ObsLayout
from envs import EnvError
from envs.perturb import PerturbationModel, dm_env_of
from inference.rare_events import amls, gaussian_model

FAILURES = ("fall", "return")


class PerturbedRollouts:
    """s(x) for a trained agent: one deterministic rollout per row of x (module docstring)."""

    def __init__(self, run_dir: Path, model: PerturbationModel, failure: str, threshold: float | None,
                 fall_fraction: float, start_seed: int = 0, warmup: float = 0.0):
        run, agent_config = load_run_config(run_dir)
        self.env = make_run_env(run.env, run.action_repeat, run.agent, agent_config, "cpu", start_seed)
        try:
            self.dm = dm_env_of(self.env)
        except ValueError as e:
            raise ConfigError(f"{run_dir}: {e}") from None
        if self.env is not self.dm:
            raise ConfigError(f"{run_dir}: agent {run.agent} acts through a wrapper of {run.env}; robustness needs "
                              "an agent that acts on the environment directly")
        self.layout = ObsLayout(self.env.observation_space)
        _, _, self.agent, self.step = load_trained_agent(run_dir, self.env.observation_space, self.env.action_space)
        self.run = run
        self.model, self.failure, self.threshold, self.fall_fraction = model, failure, threshold, fall_fraction
        self.control_dt = self.dm.control_timestep() * run.action_repeat
        self.obs0, _ = self.env.reset(seed=start_seed)
        for _ in range(int(round(warmup / self.control_dt))):   # start from the policy's own gait
            action, _ = self.agent.act(self.layout.flatten(self.obs0), deterministic=True)
            self.obs0, _, terminated, truncated, _ = self.env.step(action)
            if terminated or truncated:
                raise ConfigError(f"the episode ended during the {warmup} s warm-up; shorten --warmup")
        self.start = self.dm.get_state()
        if self.start is None:
            raise ConfigError(f"{run.env}: its episodes cannot be captured, so rollouts cannot be pinned")
        if model.init_noise > 0:
            try:
                self.dm.current_observation()
            except ValueError as e:
                raise ConfigError(f"{run.env}: {e}; perturb it by pushes only (--init-noise 0)") from None
        self.shape = model.layout(self.dm, self.control_dt)
        self.h0 = float(self.dm.physics.data.xpos[self.shape["root_body"], 2])
        if failure == "fall" and self.h0 <= 0:
            raise ConfigError(f"{run.env}: the root body starts at height {self.h0:.3f}; 'fall' needs a body above "
                              "the floor (use --failure return)")
        self.rollouts = 0

    @property
    def dim(self) -> int:
        return self.shape["dim"]

    def rollout(self, x: np.ndarray, frames: list | None = None) -> float:
        """s(x) for one x [dim] (``frames``: append rendered frames)."""
        # some agents draw torch noise even for their deterministic action (sql's sampler): pin it too
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return self._rollout(x, frames)

    def _rollout(self, x: np.ndarray, frames: list | None) -> float:
        self.dm.set_state(self.start)
        if self.model.init_noise > 0:
            self.model.apply_initial(self.dm, self.shape, x)
            obs = self.dm.current_observation()
        else:
            obs = self.obs0
        total, margin = 0.0, -math.inf
        fall_height = self.fall_fraction * self.h0
        for t in range(self.shape["steps"]):
            if frames is not None:
                frames.append(self.env.render())
            self.model.set_force(self.dm, self.shape, self.model.force_at(self.shape, x, t))
            action, _ = self.agent.act(self.layout.flatten(obs), deterministic=True)
            obs, reward, terminated, truncated, _ = self.env.step(action)
            total += reward
            margin = max(margin, (fall_height - float(self.dm.physics.data.xpos[self.shape["root_body"], 2]))
                         / self.h0)
            if terminated or truncated:
                break
        self.model.set_force(self.dm, self.shape, None)
        self.rollouts += 1
        return margin if self.failure == "fall" else self.threshold - total

    def score(self, x: torch.Tensor) -> torch.Tensor:
        values = [self.rollout(row) for row in x.detach().cpu().double().numpy()]
        return torch.tensor(values, dtype=x.dtype, device=x.device)


def _check(args) -> None:
    if args.failure == "return" and args.threshold is None:
        raise ConfigError("--failure return needs --threshold (fail when the return is at most this)")
    if args.chains < 10 or args.mh_steps < 1 or args.runs < 1 or args.naive < 0 or args.keep < 0 \
            or not 0 < args.rho < 1:
        raise ConfigError("--chains must be >= 10, --mh-steps and --runs >= 1, --naive and --keep >= 0, and --rho in "
                          "(0, 1)")
    if int(args.rho * args.chains) < 1:
        raise ConfigError(f"--rho {args.rho} keeps no chain of {args.chains} at a level; raise --rho or --chains")
    if not 0 < args.fall_fraction < 1:
        raise ConfigError("--fall-fraction must be in (0, 1)")
    if not 0 < args.p_min < 1:
        raise ConfigError("--p-min must be in (0, 1)")
    if not (math.isfinite(args.warmup) and args.warmup >= 0):
        raise ConfigError("--warmup must be a number of seconds >= 0")


def _model(args) -> PerturbationModel:
    try:
        return PerturbationModel(init_noise=args.init_noise, push_every=args.push_every,
                                 push_duration=args.push_duration, push_scale=args.push_scale, horizon=args.horizon)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def estimate(args) -> dict:
    _check(args)
    run_dir = Path(args.run_dir)
    rollouts = PerturbedRollouts(run_dir, _model(args), args.failure, args.threshold, args.fall_fraction,
                                 args.start_seed, args.warmup)
    sample, log_density = gaussian_model(rollouts.dim)
    out_dir = Path(args.out) if args.out else run_dir / "robustness" / time.strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=False)
    runs, cases = [], []
    started = time.time()
    for r in range(args.runs):
        before = rollouts.rollouts
        try:
            result = amls(sample, log_density, rollouts.score, n=args.chains, rho=args.rho, mh_steps=args.mh_steps,
                          log_p_min=math.log(args.p_min), generator=torch.Generator().manual_seed(args.seed + r))
        except RuntimeError as e:     # no level reached 0 within AMLS's level budget
            raise ConfigError(f"{e}; raise --p-min") from None
        log10 = result.log_probability / math.log(10) if result.log_probability > -math.inf else -math.inf
        runs.append({"log10_probability": log10, "levels": [float(v) for v in result.levels],
                     "terminated_at_p_min": bool(result.terminated), "rollouts": rollouts.rollouts - before})
        print(f"run {r + 1}/{args.runs}: log10 P(failure) = {log10:.3f} after {len(result.levels)} levels, "
              f"{rollouts.rollouts - before} rollouts", flush=True)
        points, scores = result.points, result.scores
        for k in torch.argsort(scores, descending=True)[:args.keep].tolist():
            cases.append({"run": r, "score": float(scores[k]), "failed": bool(scores[k] >= 0),
                          "x": [float(v) for v in points[k]]})
    cases.sort(key=lambda c: -c["score"])
    finite = [r["log10_probability"] for r in runs if r["log10_probability"] > -math.inf]
    report = {
        "run_dir": str(run_dir), "checkpoint_step": rollouts.step, "env": rollouts.run.env,
        "failure": args.failure, "threshold": args.threshold, "fall_fraction": args.fall_fraction,
        "perturbation": vars(rollouts.model), "dim": rollouts.dim, "steps_per_rollout": rollouts.shape["steps"],
        "amls": {"chains": args.chains, "rho": args.rho, "mh_steps": args.mh_steps, "p_min": args.p_min,
                 "runs": runs,
                 "log10_probability_mean": float(np.mean(finite)) if len(finite) == len(runs) else
                 (-math.inf if not finite else None),
                 "log10_probability_std": float(np.std(finite)) if len(finite) == len(runs) > 1 else None},
    }
    if args.naive:
        g = torch.Generator().manual_seed(args.seed + 10_000)
        fails = int((rollouts.score(sample(args.naive, g)) >= 0).sum())
        p = fails / args.naive
        report["naive_monte_carlo"] = {"samples": args.naive, "failures": fails, "probability": p,
                                       "log10_probability": math.log10(p) if p > 0 else -math.inf,
                                       "standard_error": math.sqrt(p * (1 - p) / args.naive)}
        print(f"naive Monte Carlo: {fails} failures in {args.naive} rollouts (P = {p:.4g})", flush=True)
    report["rollouts"], report["seconds"] = rollouts.rollouts, round(time.time() - started, 1)
    (out_dir / "cases.json").write_text(json.dumps(
        {"run_dir": str(run_dir), "settings": _replay_settings(args), "cases": cases}, indent=1))
    (out_dir / "report.json").write_text(json.dumps(report, indent=1))
    if cases and not args.no_video:
        _video(rollouts, np.array(cases[0]["x"]), out_dir / "case_0.gif")
    print(f"report: {out_dir / 'report.json'}; {len(cases)} cases in {out_dir / 'cases.json'} "
          f"(replay one: python -m pipelines robustness {run_dir} --replay {out_dir / 'cases.json'} --case 0)")
    return report


def _replay_settings(args) -> dict:
    return {k: getattr(args, k) for k in ("failure", "threshold", "fall_fraction", "init_noise", "push_every",
                                          "push_duration", "push_scale", "horizon", "start_seed", "warmup")}


def _video(rollouts: PerturbedRollouts, x: np.ndarray, path: Path) -> float:
    frames: list = []
    try:
        score = rollouts.rollout(x, frames)
    except Exception as e:     # no OpenGL here (set MUJOCO_GL=egl): the estimate stands without the video
        print(f"warning: no video ({type(e).__name__}: {str(e).splitlines()[0][:120]}); set MUJOCO_GL=egl",
              file=sys.stderr)
        return rollouts.rollout(x)
    import imageio.v3 as iio

    iio.imwrite(path, np.stack(frames[::2]), extension=".gif", duration=2000 * rollouts.control_dt, loop=0)
    print(f"video: {path}")
    return score


def replay(args) -> dict:
    path = Path(args.replay)
    try:
        saved = json.loads(path.read_text())
        settings, case = saved["settings"], saved["cases"][args.case]
        x = np.asarray(case["x"], dtype=np.float64)
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        raise ConfigError(f"{path}: not a cases file with case {args.case} ({type(e).__name__})") from None
    for key, value in settings.items():
        setattr(args, key, value)
    _check(args)
    rollouts = PerturbedRollouts(Path(args.run_dir), _model(args), args.failure, args.threshold,
                                 args.fall_fraction, args.start_seed, args.warmup)
    if x.shape != (rollouts.dim,):
        raise ConfigError(f"case {args.case} has {x.size} numbers; this run's perturbation model needs {rollouts.dim}")
    out = path.parent / f"case_{args.case}.gif"
    score = _video(rollouts, x, out) if not args.no_video else rollouts.rollout(x)
    same = math.isclose(score, case["score"], rel_tol=1e-6, abs_tol=1e-9)
    print(f"case {args.case}: score {score:.6f} (saved {case['score']:.6f}; {'reproduced' if same else 'DIFFERS'}),"
          f" {'failure' if score >= 0 else 'no failure'}")
    return {"score": score, "saved": case["score"], "reproduced": same}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory of train.py (its newest checkpoint is used)")
    p.add_argument("--failure", choices=FAILURES, default="fall")
    p.add_argument("--threshold", type=float, help="--failure return: fail when the return is at most this")
    p.add_argument("--fall-fraction", type=float, default=0.5,
                   help="--failure fall: fail when the root body sinks below this fraction of its start height")
    p.add_argument("--init-noise", type=float, default=0.05, help="std of initial joint angles and velocities")
    p.add_argument("--push-every", type=float, default=1.0, help="seconds between pushes on the root body")
    p.add_argument("--push-duration", type=float, default=0.1, help="seconds each push lasts")
    p.add_argument("--push-scale", type=float, default=0.5, help="std of each push's force components / body weight")
    p.add_argument("--horizon", type=float, default=5.0, help="seconds per rollout")
    p.add_argument("--start-seed", type=int, default=0, help="the reset seed of the pinned start state")
    p.add_argument("--warmup", type=float, default=0.0,
                   help="seconds the policy runs unperturbed after the reset before the start state is pinned")
    p.add_argument("--chains", type=int, default=100, help="AMLS samples N")
    p.add_argument("--rho", type=float, default=0.1, help="AMLS quantile per level")
    p.add_argument("--mh-steps", type=int, default=10, help="Metropolis-Hastings steps per level M")
    p.add_argument("--p-min", type=float, default=1e-12, help="stop with I = 0 below this probability")
    p.add_argument("--runs", type=int, default=3, help="independent AMLS runs (their spread is reported)")
    p.add_argument("--naive", type=int, default=0, help="also estimate by naive Monte Carlo with this many rollouts")
    p.add_argument("--keep", type=int, default=5, help="cases kept per run (the highest scores of its last level)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="output directory (default RUN_DIR/robustness/<time>)")
    p.add_argument("--no-video", action="store_true")
    p.add_argument("--replay", metavar="CASES_JSON", help="rerun one saved case instead of estimating")
    p.add_argument("--case", type=int, default=0)


def main(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)
    try:
        replay(args) if args.replay else estimate(args)
    except (ConfigError, EnvError, checkpoint.CheckpointError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
