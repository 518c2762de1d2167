"""Where svg0's training time goes, measured in one process: raw environment stepping, raw learner updates, and the
full training loop (agents/loop.py) doing the same number of env steps and updates.

    loop overhead = loop seconds / (raw env seconds + raw update seconds) - 1

The loop's extra work is acting (one policy forward per step), replay writes and sampling, logging and the final
checkpoint; its one evaluation episode at the end is timed separately and subtracted. One torch thread.

    python benchmarks/throughput.py                       # walker-walk, 5000 actor steps, the default svg0
    python benchmarks/throughput.py --task cartpole-swingup --steps 2000 --set critics=1
    python benchmarks/throughput.py --actors 1 2        # also the loop's env steps/s with distributed actors

With ``--actors``, the same loop runs again with that many Ray actors (agents/actors.py) in place of acting in the
learner's process; the learner keeps its update ratio, so actors help only where acting is the bottleneck.

Writes benchmarks/results/throughput.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

from benchmarks.runs import fail  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "throughput.json"


def measure(task: str, repeat: int, actor_steps: int, overrides: dict[str, str], seed: int = 0) -> dict:
    import torch

    import agents
    import envs
    from agents.loop import RunConfig, Trainer, evaluate

    torch.set_num_threads(1)
    config, schedule = agents.resolve("svg0", {"learning_starts": "200", **overrides})

    # the full loop first (it also fills a replay the raw update timing can sample from)
    with tempfile.TemporaryDirectory() as logdir:
        run = RunConfig(env=task, agent="svg0", steps=actor_steps * repeat, seed=seed, action_repeat=repeat,
                        device="cpu", logdir=logdir, eval_every=10**9, eval_episodes=1, log_every=1000,
                        checkpoint_every=10**9, schedule=schedule)
        trainer = Trainer(run, config)
        start = time.perf_counter()
        trainer.train()
        loop_with_eval = time.perf_counter() - start
        start = time.perf_counter()
        evaluate(trainer.agent, trainer.eval_env, trainer.layout, 1, seed=seed + 10_000)
        eval_s = time.perf_counter() - start
        loop_s = loop_with_eval - eval_s
        agent, replay = trainer.agent, trainer.replay
        updates = agent.updates

        start = time.perf_counter()
        for _ in range(updates):
            agent.update(replay.sample(schedule.batch_size))
        update_s = time.perf_counter() - start

    env = envs.make(task, seed=seed, action_repeat=repeat)
    env.reset(seed=seed)
    env.action_space.seed(seed)
    start = time.perf_counter()
    for _ in range(actor_steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    env_s = time.perf_counter() - start
    return {"task": task, "action_repeat": repeat, "actor_steps": actor_steps, "updates": updates,
            "raw_env_s": env_s, "raw_update_s": update_s, "loop_s": loop_s, "eval_s_subtracted": eval_s,
            "raw_env_steps_per_s": actor_steps * repeat / env_s, "raw_updates_per_s": updates / update_s,
            "loop_env_steps_per_s": actor_steps * repeat / loop_s,
            "loop_overhead": loop_s / (env_s + update_s) - 1.0, "svg0_overrides": overrides}


def with_actors(task: str, repeat: int, actor_steps: int, overrides: dict[str, str], actors: int) -> dict:
    """The loop's env steps/s with ``actors`` distributed actors (Ray startup excluded)."""
    import torch

    import agents
    from agents.loop import RunConfig, Trainer

    torch.set_num_threads(1)
    config, schedule = agents.resolve("svg0", {"learning_starts": "200", **overrides})
    with tempfile.TemporaryDirectory() as logdir:
        run = RunConfig(env=task, agent="svg0", steps=actor_steps * repeat, seed=0, action_repeat=repeat,
                        device="cpu", logdir=logdir, eval_every=10**9, eval_episodes=1, log_every=1000,
                        checkpoint_every=10**9, actors=actors, schedule=schedule)
        trainer = Trainer(run, config)
        source = trainer.experience_source()  # start Ray and the actors outside the timed part
        import ray

        ray.get([actor.pid.remote() for actor in source.actors])
        start = time.perf_counter()
        trainer.train(source)
        loop_s = time.perf_counter() - start
    return {"actors": actors, "loop_s": loop_s, "updates": trainer.agent.updates,
            "loop_env_steps_per_s": trainer.env_steps / loop_s}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="walker-walk")
    p.add_argument("--action-repeat", type=int, default=2)
    p.add_argument("--steps", type=int, default=5000, help="actor steps")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides")
    p.add_argument("--actors", type=int, nargs="*", default=[], help="also time the loop with these actor counts")
    p.add_argument("--output", type=Path, default=RESULTS)
    args = p.parse_args()
    if args.steps < 500 or args.action_repeat < 1:
        fail("--steps must be >= 500 (the first 200 steps only fill replay), --action-repeat >= 1")
    overrides = {}
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep:
            fail(f"--set expects key=value, got {item!r}")
        overrides[key] = value
    from agents.config import ConfigError

    try:
        result = measure(args.task, args.action_repeat, args.steps, overrides)
        result["distributed"] = [with_actors(args.task, args.action_repeat, args.steps, overrides, a)
                                 for a in args.actors if a >= 1]
    except ConfigError as e:
        fail(f"{e}")
    result.update(command="python " + " ".join(["benchmarks/throughput.py", *sys.argv[1:]]),
                  machine=f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
                  date=time.strftime("%Y-%m-%d"))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
