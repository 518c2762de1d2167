"""svg0 on dm_control humanoid-walk to 1M environment steps: the "hard body" of issue 12 (target >= 600; SAC in public
result CSVs is at 274 at 1M steps, TD-MPC2 reaches ~600+).

One run, resumable: it lives in ``--run-dir`` (checkpoints every 20k steps) and each invocation continues it from its
newest checkpoint, training for at most ``--hours`` (then it checkpoints and stops). After every invocation the
evaluation curve read from the run's TensorBoard events is written to benchmarks/results/humanoid_walk.json (keep
that file: the run directory itself is too large for the repository). On 2 CPU cores a full run takes roughly
3-4 hours of one core; on a 16-core machine run it with ``--actors`` to act in parallel.

    python benchmarks/humanoid_walk.py --hours 2            # start or continue
    python benchmarks/humanoid_walk.py --hours 2 --actors 4 --set batch_size=32
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

from benchmarks.runs import fail  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "humanoid_walk.json"
TASK, REPEAT, BUDGET = "humanoid-walk", 2, 1_000_000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hours", type=float, default=2.0, help="train at most this long in this invocation")
    p.add_argument("--run-dir", type=Path, default=ROOT / "runs" / "humanoid_walk")
    p.add_argument("--actors", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads of the learner (2 pays off for wide critics)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides")
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("--report", action="store_true",
                   help="only write the result file from the run directory (e.g. after the run was stopped)")
    args = p.parse_args()
    if args.hours <= 0 or args.actors < 0 or args.threads < 1:
        fail("--hours must be > 0, --actors >= 0 and --threads >= 1")
    import dataclasses

    import agents
    from agents import checkpoint
    from agents.config import ConfigError
    from agents.loop import RunConfig, Trainer, load_run_config
    from agents.runlock import RunDirectoryBusy

    overrides = dict(item.partition("=")[::2] for item in args.overrides)
    if args.report:
        try:
            run, config = load_run_config(args.run_dir)
            step = int(checkpoint.latest(args.run_dir / "checkpoints").name.split("-")[1])
        except checkpoint.CheckpointError as e:
            fail(f"{e}")
        write_result(args, step, run, config)
        return
    try:
        if (args.run_dir / "checkpoints" / "latest").exists():
            run, config = load_run_config(args.run_dir)
            if overrides:
                raise ConfigError("the run exists; its settings cannot change (pass another --run-dir)")
            resume = checkpoint.latest(args.run_dir / "checkpoints")
        else:
            (config, schedule), resume = agents.resolve("svg0", overrides), None
            run = RunConfig(env=TASK, agent="svg0", steps=BUDGET, seed=args.seed, action_repeat=REPEAT,
                            logdir=str(args.run_dir), eval_every=20_000, eval_episodes=5, checkpoint_every=20_000,
                            schedule=schedule)
        # a resumed run stored the step bound of its last leg; the legs below set their own bounds
        run = dataclasses.replace(run, actors=args.actors, threads=args.threads, steps=BUDGET)
        trainer = Trainer(run, config, resume_from=resume)
    except (ConfigError, checkpoint.CheckpointError, RunDirectoryBusy) as e:
        fail(f"{e}")
    from agents.protocol import RunInterrupted

    try:
        train_for(trainer, run, args.hours)
    except RunInterrupted as e:   # SIGINT/SIGTERM: the trainer checkpointed; keep the curve so far
        write_result(args, e.step, run, config)
        print(f"stopped by {e}; continue with the same command", file=sys.stderr)
        raise SystemExit(e.exit_status)
    write_result(args, trainer.env_steps, run, config)


def train_for(trainer, run, hours: float) -> None:
    """Train towards BUDGET, stopping at the first checkpoint after ``hours``: a first short leg measures the speed,
    then the step bound that fits the remaining time."""
    import dataclasses

    start, rate_steps = time.time(), trainer.env_steps
    if trainer.env_steps < BUDGET:
        trainer.run = dataclasses.replace(run, steps=min(BUDGET, trainer.env_steps + 20_000))
        trainer.train()
        rate = (trainer.env_steps - rate_steps) / max(time.time() - start, 1e-9)
        left = hours * 3600 - (time.time() - start)
        target = min(BUDGET, trainer.env_steps + int(max(left, 0) * rate) // 20_000 * 20_000)
        if target > trainer.env_steps:
            trainer.run = dataclasses.replace(run, steps=target)
            trainer.train()


def behaviour(run_dir: Path, episodes: int = 3) -> dict:
    """What the newest policy does, in absolute terms (a return alone hides a humanoid that falls and gets up):
    per deterministic episode, the return, the fraction of steps with the torso below 0.75 m (about half its standing
    height: down), the falls (the torso dropping from above 1.0 m to below 0.6 m) and the mean horizontal speed."""
    import numpy as np

    import envs
    from agents.loop import load_trained_agent
    from agents.observations import ObsLayout

    env = envs.make(TASK, seed=0, action_repeat=REPEAT)
    layout = ObsLayout(env.observation_space)
    _, _, agent, step = load_trained_agent(run_dir, env.observation_space, env.action_space)
    out = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=episode)
        heights, positions, total, done = [], [], 0.0, False
        while not done:
            action, _ = agent.act(layout.flatten(obs), deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + reward, terminated or truncated
            heights.append(float(env.physics.data.xpos[1, 2]))
            positions.append(env.physics.data.xpos[1, :2].copy())
        falls, up = 0, heights[0] > 1.0
        for h in heights:
            if up and h < 0.6:
                falls, up = falls + 1, False
            elif not up and h > 1.0:
                up = True
        out.append({"return": round(total, 1), "fraction_down": round(float(np.mean(np.array(heights) < 0.75)), 3),
                    "falls": falls, "mean_speed_m_per_s": round(float(np.linalg.norm(positions[-1] - positions[0])
                                                                    / (len(heights) * env.control_timestep() * REPEAT)), 2)})
    env.close()
    return {"checkpoint_step": step, "episodes": out}


def write_result(args, env_steps: int, run, config) -> None:
    """The evaluation curve read from the run's TensorBoard events, with the run's settings and schedule."""
    import dataclasses

    from benchmarks.runs import read_series

    curve = read_series(args.run_dir, "eval/return")
    result = {"task": TASK, "action_repeat": REPEAT, "budget": BUDGET, "env_steps": env_steps,
              "settings": json.loads(json.dumps(dataclasses.asdict(config))), "eval_curve": curve,
              "final_eval_return": curve[-1][1] if curve else None, "target": 600,
              "behaviour": behaviour(args.run_dir),
              "seed": run.seed, "schedule": dataclasses.asdict(run.schedule),
              # the command that trains the run, also when this is a --report
              "command": "python " + " ".join(["benchmarks/humanoid_walk.py",
                                                 *(a for a in sys.argv[1:] if a != "--report")])}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "eval_curve"}, indent=1))


if __name__ == "__main__":
    main()
