"""What the frozen primitives do before any high-level learning (seed 000 §8.4, Fig 8.6a: "more regularised modules
... are less likely to fall at the start").

On ``humanoid`` (the reuse task of ``make run``), the decoder acts on latents that no policy chose, from the
task's own start (a frame of the shipped CMU snippets at a random position and heading; ``--start stand``: the
upright default pose at rest, the task's start until 2026-11-25): ``prior`` draws z_t from the AR(1) prior the
primitives were trained with (z_t = alpha z_{t-1} + sqrt(1 - alpha^2) eps, the marginal N(0, I)), ``zero`` holds z_t = 0 (the
prior's mean), ``planned`` chooses z_t by predictive sampling with the simulator itself (``LatentPlanner``: every
``--replan-every`` steps, ``--candidates`` latent sequences of ``--horizon`` steps -- the previous plan shifted, the
rest AR(1) continuations of the current z -- are each run from a capture of the episode, and the best is followed:
not fallen, then most steps survived, then most return, then nearest the target; ``--objective upright``: not fallen,
then most steps, then the highest head at the candidate's end). ``planned`` bounds from above what a high-level
policy could get out of the primitives with this much search: if it falls too, the primitives, not the learner,
limit reuse (opt-in: ``--latents planned``, seconds of a core per step). Next to them, the body without
primitives: ``hold-pose`` commands every servo to its start angle.
Reported per condition: steps before the fall (the episode ends when the head drops below 0.95 m; 833 steps is the
25 s limit), planar distance from the start, the net turn of the heading (can the primitives turn at all?), and how
many episodes earned any return (came within 1 m of the target) and reached targets: the chance level of the task,
against which learning is judged. A high-level policy starts near these behaviours (its initial actions are small
and noisy), so they bound what reuse begins from.

    python benchmarks/npmp_prior_samples.py                       # shipped beta = 0.1 and beta = 0.001, 8 episodes
    python benchmarks/npmp_prior_samples.py --primitives runs/x/primitives --episodes 20 --results /tmp/p.json
    python benchmarks/npmp_prior_samples.py --start stand --results benchmarks/results/npmp_prior_samples_stand.json
    python benchmarks/npmp_prior_samples.py --latents planned --candidates 128 --horizon 45 --replan-every 2
    python benchmarks/npmp_prior_samples.py --latents planned --objective upright --horizon 60
"""
from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import envs  # noqa: E402
from benchmarks.runs import fail, write_json  # noqa: E402
from envs.locomotion import STARTS  # noqa: E402
from envs.mocap.convert import yaw  # noqa: E402
from envs.mocap.tracking import hold_pose_command  # noqa: E402
from priors.models import ar1_chain  # noqa: E402
from priors.npmp import DEFAULT_PRIMITIVES, ModuleFileError, load_primitives  # noqa: E402
from priors.reuse import LatentActionEnv  # noqa: E402

ENV = "humanoid"
LATENTS = ("prior", "zero", "planned")
OBJECTIVES = ("target", "upright")   # what planned latents rank candidates by, after surviving (LatentPlanner)


def episode(env, act, seed: int) -> dict:
    """One episode of ``env`` driven by ``act(step)``: steps, whether it fell, distance travelled in the plane, the
    net turn of the heading (degrees, counter-clockwise positive), the return (steps within 1 m of the target) and
    the targets reached (held for 10 steps)."""
    env.reset(seed=seed)
    task, physics = env.unwrapped.task, env.unwrapped.physics
    start = task.root_position(physics)[:2].copy()
    steps, fell, ret, headings = 0, False, 0.0, [yaw(physics.bind(task.walker.root_body).xquat)]
    while True:
        _, reward, terminated, truncated, info = env.step(act(steps))
        steps, ret = steps + 1, ret + float(reward)
        headings.append(yaw(physics.bind(task.walker.root_body).xquat))
        if terminated or truncated:
            fell = bool(info.get("fell", False))
            targets = int(info["episode_metrics"]["task/targets_reached"])
            break
    turned = np.unwrap(headings)
    return {"steps": steps, "fell": fell, "distance": float(np.linalg.norm(task.root_position(physics)[:2] - start)),
            "turn_degrees": float(np.degrees(turned[-1] - turned[0])), "return": ret, "targets_reached": targets}


class LatentPlanner:
    """Predictive sampling over the latents of ``env`` (a ``LatentActionEnv`` with scale 1) using the simulator: call
    ``reset`` after each ``env.reset``, then ``act(step)`` gives z_step (module docstring)."""

    def __init__(self, env: LatentActionEnv, ar_coef: float, candidates: int, horizon: int, replan_every: int,
                 objective: str = "target"):
        if candidates < 1 or horizon < 1 or not 1 <= replan_every <= horizon:
            raise ValueError("candidates and horizon must be >= 1 and replan_every in 1..horizon")
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}")
        self.env, self.ar_coef, self.objective = env, ar_coef, objective
        self.candidates, self.horizon, self.replan_every = candidates, horizon, replan_every
        self.latent_dim = env.action_space.shape[0]

    def reset(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.z = np.zeros(self.latent_dim, np.float32)   # z_{-1}: the first latents start from the prior's mean
        self.plan = None

    def _continuations(self) -> np.ndarray:
        """AR(1) continuations of the current z [candidates, horizon, L] (eq 8.2)."""
        a = self.ar_coef
        z = np.broadcast_to(self.z, (self.candidates, self.latent_dim))
        out = []
        for _ in range(self.horizon):
            z = a * z + np.sqrt(1.0 - a * a) * self.rng.standard_normal(z.shape)
            out.append(z)
        return np.stack(out, axis=1).astype(np.float32)

    def _score(self, latents: np.ndarray) -> tuple:
        steps, ret, fell = 0, 0.0, False
        for z in latents:
            _, reward, terminated, truncated, info = self.env.step(z)
            steps, ret = steps + 1, ret + float(reward)
            if terminated or truncated:
                fell = bool(info.get("fell", False))
                break
        task, physics = self.env.unwrapped.task, self.env.unwrapped.physics
        if self.objective == "upright":   # the head's height where the candidate ends: furthest from a fall
            return (not fell, steps, float(physics.bind(task.head).xpos[2]))
        distance = np.linalg.norm(task.objective.positions(physics)[0, :2] - task.root_position(physics)[:2])
        return (not fell, steps, ret, -float(distance))

    def _replan(self) -> None:
        captured = self.env.get_state()
        candidates = self._continuations()
        if self.plan is not None:   # warm start: the rest of the plan being followed, its last latent held
            k = self.replan_every
            candidates[0] = np.concatenate([self.plan[k:], np.repeat(self.plan[-1:], k, axis=0)])
        scores = []
        for latents in candidates:
            self.env.set_state(captured)
            scores.append(self._score(latents))
        self.env.set_state(captured)
        self.plan = candidates[max(range(len(scores)), key=scores.__getitem__)]

    def act(self, step: int) -> np.ndarray:
        if step % self.replan_every == 0:
            self._replan()
        self.z = self.plan[step % self.replan_every]
        return self.z


def latent_episodes(primitives: Path, latents: str, episodes: int, start: str, planner: dict | None = None
                    ) -> list[dict]:
    model, meta = load_primitives(primitives)
    c = model.config
    env = LatentActionEnv(envs.make(ENV, seed=0, start=start), model.decode, c.latent_dim, meta["obs_groups"],
                          scale=1.0, mean_to_action="clip", action_dim=c.action_dim)
    task = env.unwrapped.task
    limit = int(np.ceil(task.objective.time_limit / task.control_timestep))   # steps in the longest episode
    out = []
    for seed in range(episodes):
        if latents == "planned":
            plan = LatentPlanner(env, c.ar_coef, **(planner or {}))
            plan.reset(seed)
            act = plan.act
        elif latents == "zero":
            chain = np.zeros((limit, c.latent_dim), np.float32)
            act = chain.__getitem__
        else:
            generator = torch.Generator().manual_seed(seed)
            chain = ar1_chain(limit, 1, c.latent_dim, c.ar_coef, generator)[0].numpy()
            act = chain.__getitem__
        out.append(episode(env, act, seed))
        if latents == "planned":   # minutes per episode: say how each went
            print(f"  planned episode {seed}: {out[-1]}", flush=True)
    env.close()
    return out


def hold_pose_episodes(episodes: int, start: str) -> list[dict]:
    env = envs.make(ENV, seed=0, start=start)
    out = []
    for seed in range(episodes):
        env.reset(seed=seed)
        hold = hold_pose_command(env.unwrapped.physics, env.unwrapped.task.walker).astype(np.float32)
        out.append(episode(env, lambda step: hold, seed))
    env.close()
    return out


def summarise(runs: list[dict]) -> dict:
    return {"episodes": len(runs), "median_steps": statistics.median(r["steps"] for r in runs),
            "mean_steps": statistics.fmean(r["steps"] for r in runs),
            "fell_fraction": statistics.fmean(r["fell"] for r in runs),
            "mean_distance": statistics.fmean(r["distance"] for r in runs),
            "median_abs_turn_degrees": statistics.median(abs(r["turn_degrees"]) for r in runs),
            # by chance: nothing here steers; a start in motion can carry the walker onto a target
            "episodes_with_return": sum(r["return"] > 0 for r in runs),
            "targets_reached": sum(r["targets_reached"] for r in runs), "runs": runs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--primitives", type=Path, nargs="+",
                   default=[DEFAULT_PRIMITIVES, DEFAULT_PRIMITIVES.parent / "npmp-beta0.001"])
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "npmp_prior_samples.json")
    p.add_argument("--start", choices=STARTS, default="mocap",
                   help="how episodes start (envs/locomotion.py; the humanoid task's own: mocap)")
    p.add_argument("--latents", choices=LATENTS, nargs="+", default=["prior", "zero"],
                   help="where z_t comes from (planned costs seconds per step: ask for it)")
    p.add_argument("--candidates", type=int, default=32, help="planned: latent sequences tried per replanning")
    p.add_argument("--horizon", type=int, default=30, help="planned: steps each candidate is run for")
    p.add_argument("--replan-every", type=int, default=3, help="planned: steps between replannings")
    p.add_argument("--objective", choices=OBJECTIVES, default="target",
                   help="planned: rank surviving candidates by return then nearness to the target, or by the head's "
                        "height at their end (upright: can any latents keep the humanoid up?)")
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error("--episodes must be at least 1")
    if args.candidates < 1 or args.horizon < 1 or not 1 <= args.replan_every <= args.horizon:
        p.error("--candidates and --horizon must be >= 1, --replan-every between 1 and --horizon")
    planner = {"candidates": args.candidates, "horizon": args.horizon, "replan_every": args.replan_every,
               "objective": args.objective}
    torch.set_num_threads(1)
    results = {"command": "python " + " ".join([f"benchmarks/{Path(__file__).name}", *(argv or sys.argv[1:])]),
               "date": datetime.date.today().isoformat(), "env": ENV, "start": args.start,
               **({"planner": planner} if "planned" in args.latents else {}), "conditions": {}}
    try:
        for primitives in args.primitives:
            _, meta = load_primitives(primitives)
            for latents in args.latents:
                key = f"{primitives.name} (beta {meta['config']['beta']}), z: {latents}"
                runs = latent_episodes(primitives, latents, args.episodes, args.start, planner)
                results["conditions"][key] = summarise(runs)
                print(key, {k: v for k, v in results["conditions"][key].items() if k != "runs"}, flush=True)
    except ModuleFileError as e:
        fail(f"primitives: {e}")
    results["conditions"]["hold-pose (no primitives)"] = summarise(hold_pose_episodes(args.episodes, args.start))
    print("hold-pose", {k: v for k, v in results["conditions"]["hold-pose (no primitives)"].items() if k != "runs"})
    write_json(args.results, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
