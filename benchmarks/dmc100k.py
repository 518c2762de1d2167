"""PlaNet-100k protocol: svg0 against Stable-Baselines3 SAC on the same ``envs.make`` environments.

100k environment steps (counting action repeats) per run; action repeat 8 for cartpole-swingup, 4 for cheetah-run,
reacher-easy and ball_in_cup-catch, 2 for walker-walk and finger-spin. Each run ends with a deterministic evaluation
over 10 episodes. Both agents run in this one invocation, as worker processes on the same machine with the same
budget (one torch thread each), and the throughput breakdown (raw env steps/s, raw learner updates/s) is measured
in this process too.

    python benchmarks/dmc100k.py                          # full protocol, 2 seeds, 2 workers
    python benchmarks/dmc100k.py --budget 20000 --tasks cartpole-swingup --seeds 1    # a quick look

Writes benchmarks/results/dmc100k.json (updated after every finished run) and docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TASKS = {"cartpole-swingup": 8, "cheetah-run": 4, "reacher-easy": 4, "ball_in_cup-catch": 4, "walker-walk": 2,
         "finger-spin": 2}
EVAL_EPISODES = 10
RESULTS = ROOT / "benchmarks" / "results" / "dmc100k.json"
DOCS = ROOT / "docs" / "benchmarks.md"


def _eval_seed(seed: int) -> int:
    return 10_000 + seed


def run_svg0(task: str, repeat: int, seed: int, budget: int) -> dict:
    import agents
    from agents.loop import RunConfig, Trainer

    with tempfile.TemporaryDirectory() as logdir:
        run = RunConfig(env=task, agent="svg0", steps=budget, seed=seed, action_repeat=repeat, device="cpu",
                        logdir=logdir, eval_every=budget, eval_episodes=EVAL_EPISODES, checkpoint_every=budget,
                        log_every=budget)
        trainer = Trainer(run, agents.resolve_config("svg0", {}))
        start = time.perf_counter()
        result = trainer.train()
        wall = time.perf_counter() - start
    return {"return": result["eval_return"], "wall_s": wall, "updates": trainer.agent.updates}


def run_sac(task: str, repeat: int, seed: int, budget: int) -> dict:
    import gymnasium as gym
    import numpy as np
    from stable_baselines3 import SAC

    import envs

    env = gym.wrappers.FlattenObservation(envs.make(task, seed=seed, action_repeat=repeat))
    eval_env = gym.wrappers.FlattenObservation(envs.make(task, seed=_eval_seed(seed), action_repeat=repeat))
    start = time.perf_counter()
    model = SAC("MlpPolicy", env, seed=seed, device="cpu", verbose=0)  # SB3 defaults
    model.learn(total_timesteps=budget // repeat)
    returns = []
    for episode in range(EVAL_EPISODES):
        obs, _ = eval_env.reset(seed=_eval_seed(seed) + episode)
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = eval_env.step(action)
            total += reward
            done = terminated or truncated
        returns.append(total)
    # wall time covers training and evaluation, as for svg0
    return {"return": float(np.mean(returns)), "wall_s": time.perf_counter() - start,
            "updates": int(model._n_updates)}


RUNNERS = {"svg0": run_svg0, "sac": run_sac}


def job(args: tuple) -> dict:
    import torch

    torch.set_num_threads(1)
    task, agent, seed, budget = args
    out = RUNNERS[agent](task, TASKS[task], seed, budget)
    out.update(task=task, agent=agent, seed=seed, env_steps=budget, action_repeat=TASKS[task],
               env_steps_per_s=budget / out["wall_s"])
    print(f"[dmc100k] {task} {agent} seed {seed}: return {out['return']:.1f}, {out['wall_s']:.0f} s, "
          f"{out['env_steps_per_s']:.0f} env steps/s", flush=True)
    return out


def throughput(task: str = "walker-walk", n: int = 2000) -> dict:
    """Raw env steps/s (random actions), raw svg0 and SAC learner updates/s, in this process."""
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3 import SAC

    import agents
    import envs
    from agents.observations import ObsLayout
    from agents.replay import SequenceReplay

    torch.set_num_threads(1)
    repeat = TASKS[task]
    env = envs.make(task, seed=0, action_repeat=repeat)
    env.reset(seed=0)
    start = time.perf_counter()
    for _ in range(n):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    env_rate = n * repeat / (time.perf_counter() - start)

    config = agents.resolve_config("svg0", {})
    agent = agents.make("svg0", env.observation_space, env.action_space, config)
    layout = ObsLayout(env.observation_space)
    replay = SequenceReplay(10_000, layout.dim, env.action_space.shape[0], config.sequence_length,
                            np.random.default_rng(0))
    obs, _ = env.reset(seed=1)
    replay.start_episode(layout.flatten(obs))
    for _ in range(2000):
        action, log_prob = agent.act(layout.flatten(obs))
        obs, reward, terminated, truncated, _ = env.step(action)
        over = terminated or truncated
        replay.add(action, log_prob, reward, terminated, layout.flatten(obs), over)
        if over:
            obs, _ = env.reset()
            replay.start_episode(layout.flatten(obs))
    updates = 100
    start = time.perf_counter()
    for _ in range(updates):
        agent.update(replay.sample(config.batch_size))
    svg0_rate = updates / (time.perf_counter() - start)

    flat = gym.wrappers.FlattenObservation(envs.make(task, seed=0, action_repeat=repeat))
    model = SAC("MlpPolicy", flat, seed=0, device="cpu", verbose=0, learning_starts=1000)
    model.learn(1100)
    start = time.perf_counter()
    model.train(gradient_steps=updates, batch_size=model.batch_size)
    sac_rate = updates / (time.perf_counter() - start)
    return {"task": task, "raw_env_steps_per_s": env_rate, "svg0_updates_per_s": svg0_rate,
            "svg0_transitions_per_update": config.batch_size * config.sequence_length,
            "svg0_update_every": config.update_every,
            "sac_updates_per_s": sac_rate, "sac_transitions_per_update": model.batch_size}


def summarise(runs: list[dict]) -> dict:
    import numpy as np

    table = {}
    for task in TASKS:
        row = {}
        for agent in RUNNERS:
            rs = [r for r in runs if r["task"] == task and r["agent"] == agent]
            if rs:
                row[agent] = {"mean_return": float(np.mean([r["return"] for r in rs])),
                              "std_return": float(np.std([r["return"] for r in rs])),
                              "env_steps_per_s": float(np.mean([r["env_steps_per_s"] for r in rs])),
                              "seeds": len(rs)}
        if len(row) == 2:
            row["svg0_return_ge_sac"] = row["svg0"]["mean_return"] >= row["sac"]["mean_return"]
            row["speed_ratio_svg0_over_sac"] = row["svg0"]["env_steps_per_s"] / row["sac"]["env_steps_per_s"]
        table[task] = row
    return table


def write_docs(result: dict, docs: Path = DOCS) -> None:
    lines = ["# Benchmarks", "", "## DMC 100k (PlaNet protocol): svg0 vs Stable-Baselines3 SAC", "",
             f"Produced by `{result['command']}` on {result['machine']} ({result['date']}). Budget: "
             f"{result['budget']} environment steps per run (counting action repeats), deterministic evaluation over "
             f"{EVAL_EPISODES} episodes at the end, one torch thread per run, {result['workers']} runs in parallel. "
             "Both agents use their library defaults (svg0: `agents/svg0.py`; SAC: SB3 defaults, 256x256 MLPs, "
             "batch 256, one update per step).", "",
             "| task | repeat | svg0 return | SAC return | svg0 env steps/s | SAC env steps/s | speed ratio |",
             "|---|---|---|---|---|---|---|"]
    for task, row in result["summary"].items():
        def cell(agent, key="mean_return"):
            if agent not in row:
                return "not run"
            if key == "mean_return":
                return f"{row[agent]['mean_return']:.1f} ± {row[agent]['std_return']:.1f} (n={row[agent]['seeds']})"
            return f"{row[agent][key]:.0f}"
        ratio = f"{row['speed_ratio_svg0_over_sac']:.2f}x" if "speed_ratio_svg0_over_sac" in row else "-"
        lines.append(f"| {task} | {TASKS[task]} | {cell('svg0')} | {cell('sac')} | {cell('svg0', 'env_steps_per_s')}"
                     f" | {cell('sac', 'env_steps_per_s')} | {ratio} |")
    wins = sum(1 for row in result["summary"].values() if row.get("svg0_return_ge_sac"))
    compared = sum(1 for row in result["summary"].values() if "svg0_return_ge_sac" in row)
    lines += ["", f"svg0 mean return >= SAC's on {wins} of {compared} tasks compared.", ""]
    t = result.get("throughput")
    if t:
        lines += ["### Throughput breakdown (same process, one thread)", "",
                  f"- raw environment steps/s ({t['task']}, random actions): {t['raw_env_steps_per_s']:.0f}",
                  f"- svg0 learner updates/s: {t['svg0_updates_per_s']:.1f} "
                  f"({t['svg0_transitions_per_update']} transitions per update, one update every "
                  f"{t['svg0_update_every']} actor steps)",
                  f"- SAC learner updates/s: {t['sac_updates_per_s']:.1f} ({t['sac_transitions_per_update']} "
                  "transitions per update, one update per actor step)",
                  "- full training loop: the env steps/s columns above", ""]
    docs.parent.mkdir(exist_ok=True)
    text = docs.read_text() if docs.exists() else ""
    marker = "<!-- dmc100k end -->"
    section = "\n".join(lines) + "\n" + marker + "\n"
    if marker in text:
        text = section + text.split(marker, 1)[1].lstrip("\n")
    else:
        text = section + ("\n" + text if text else "")
    docs.write_text(text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=int, default=100_000)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--agents", nargs="+", default=list(RUNNERS), choices=list(RUNNERS))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("--docs", type=Path, default=DOCS)
    p.add_argument("--report", action="store_true", help="only rewrite the docs table from --output")
    args = p.parse_args()
    if args.report:
        write_docs(json.loads(args.output.read_text()), args.docs)
        return
    os.environ.setdefault("MUJOCO_GL", "egl")

    # seed 0 of every task and agent first, so a partial run already compares everything once
    jobs = [(task, agent, seed, args.budget) for seed in range(args.seeds) for task in args.tasks
            for agent in args.agents]
    result = {"command": "python " + " ".join(["benchmarks/dmc100k.py", *sys.argv[1:]]),
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "date": time.strftime("%Y-%m-%d"), "budget": args.budget, "workers": args.workers,
              "eval_episodes": EVAL_EPISODES, "runs": [], "summary": {}}
    result["throughput"] = throughput()
    print(f"[dmc100k] throughput: {result['throughput']}", flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with mp.get_context("spawn").Pool(args.workers, maxtasksperchild=1) as pool:
        for out in pool.imap_unordered(job, jobs):
            result["runs"].append(out)
            result["summary"] = summarise(result["runs"])
            args.output.write_text(json.dumps(result, indent=1))
            write_docs(result, args.docs)
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
