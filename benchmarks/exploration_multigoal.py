"""Issue #7, experiment 3: soft Q-learning (amortised-SVGD sampler) against a unimodal Gaussian policy (svg0) on the
multi-goal environment of Haarnoja et al. 2017 (envs/multigoal.py).

Each agent trains through the repository's Trainer (train.py's loop) on ``multigoal`` for the same number of
environment steps and seeds; then its *sampled* (stochastic) policy runs ``rollouts`` episodes from the origin and
we count which of the four goals each episode ends in. The paper's claim for this example: the energy-based
policy reaches all four goals, a unimodal policy commits to one or two.

Reported per agent and seed: ``goals_reached`` (distinct goals reached in the rollouts, out of 4), ``goal_counts``
(episodes ending in each goal, in the order (5,0), (-5,0), (0,5), (0,-5)), ``success_rate`` (episodes ending in
any goal), ``mean_return``; and over seeds the mean fraction of goals reached.

    python benchmarks/exploration_multigoal.py                      # 3 seeds x 2 agents, writes results + PNG
    python benchmarks/exploration_multigoal.py --seeds 0 --steps 3000 --no-write    # a quick look
    python benchmarks/exploration_multigoal.py --agents sql --set sql:reward_scale=1 --variant sql_reward_scale_1

Writes key "multigoal" (or "multigoal_<variant>") of benchmarks/results/exploration.json (other keys are left
as they are) and, without --variant, docs/img/exploration_multigoal.png (the rollouts of seed 0, side by side).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results" / "exploration.json"
FIGURE = ROOT / "docs" / "img" / "exploration_multigoal.png"
# The authors' multi-goal example scales rewards by 0.1 (alpha = 1), i.e. temperature 10 in raw reward units.
AGENT_SETTINGS = {"sql": {"reward_scale": "0.1"}, "svg0": {}}


def rollouts(agent, episodes: int, seed: int) -> dict:
    """Run the agent's sampled policy ``episodes`` times from the origin; goals reached and trajectories."""
    import envs
    from agents.observations import ObsLayout

    env = envs.make("multigoal", seed=seed)
    layout = ObsLayout(env.observation_space)
    counts, returns, paths = np.zeros(4, int), [], []
    for episode in range(episodes):
        obs, info = env.reset(seed=seed + episode)
        path, total, done = [info["pos"]], 0.0, False
        while not done:
            action, _ = agent.act(layout.flatten(obs), deterministic=False)
            obs, reward, terminated, truncated, info = env.step(action)
            path.append(info["pos"])
            total += reward
            done = terminated or truncated
        if info["goal"] >= 0:
            counts[info["goal"]] += 1
        returns.append(total)
        paths.append(np.array(path))
    return {"goal_counts": counts.tolist(), "goals_reached": int((counts > 0).sum()),
            "success_rate": float(counts.sum() / episodes), "mean_return": float(np.mean(returns)), "paths": paths}


def train_and_roll_out(agent_name: str, seed: int, steps: int, episodes: int, overrides: dict[str, str]) -> dict:
    import torch

    import agents
    from agents.loop import RunConfig, Trainer

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as logdir:
        config, schedule = agents.resolve(agent_name, overrides)
        run = RunConfig(env="multigoal", agent=agent_name, steps=steps, seed=seed, device="cpu", logdir=logdir,
                        eval_every=steps, eval_episodes=1, checkpoint_every=steps, log_every=steps, schedule=schedule)
        trainer = Trainer(run, config)
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
    torch.manual_seed(10_000 + seed)
    result = rollouts(trainer.agent, episodes, seed=20_000 + 1000 * seed)
    result["train_wall_s"] = wall
    return result


def run_multigoal(seeds=(0, 1, 2), steps: int = 10_000, episodes: int = 100, agent_names=("sql", "svg0"),
                  figure: Path | None = FIGURE, settings: dict[str, dict[str, str]] | None = None) -> dict:
    """Train each agent for ``steps`` environment steps per seed, roll out its sampled policy ``episodes`` times and
    count the goals reached. ``settings``: config overrides per agent (default ``AGENT_SETTINGS``). Returns the
    results dict (trajectories are only drawn, not returned)."""
    settings = {name: dict(AGENT_SETTINGS[name]) for name in agent_names} if settings is None else settings
    per_agent: dict[str, list[dict]] = {name: [] for name in agent_names}
    first_paths = {}
    for seed in seeds:
        for name in agent_names:
            result = train_and_roll_out(name, seed, steps, episodes, settings.get(name, {}))
            paths = result.pop("paths")
            if name not in first_paths:
                first_paths[name] = paths
            per_agent[name].append({"seed": seed, **result})
            print(f"{name} seed {seed}: goals {result['goals_reached']}/4 counts {result['goal_counts']} "
                  f"success {result['success_rate']:.2f} return {result['mean_return']:.1f} "
                  f"({result['train_wall_s']:.0f} s)", flush=True)
    summary = {name: {"mean_fraction_of_goals_reached": float(np.mean([r["goals_reached"] / 4 for r in runs])),
                      "mean_success_rate": float(np.mean([r["success_rate"] for r in runs])),
                      "runs": runs} for name, runs in per_agent.items()}
    if figure is not None:
        plot_paths(first_paths, Path(figure), steps, seeds[0])
    return {"steps": steps, "rollouts_per_seed": episodes, "seeds": list(seeds),
            "agent_settings": {k: settings.get(k, {}) for k in agent_names}, "agents": summary}


def plot_paths(paths_by_agent: dict, path: Path, steps: int, seed: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from envs.multigoal import BOUND, GOAL_RADIUS, GOALS

    fig, axes = plt.subplots(1, len(paths_by_agent), figsize=(4.2 * len(paths_by_agent), 4.2))
    axes = np.atleast_1d(axes)
    xs = np.linspace(-BOUND, BOUND, 200)
    grid = np.stack(np.meshgrid(xs, xs), -1)
    cost = np.min(((grid[..., None, :] - GOALS) ** 2).sum(-1), -1)  # the distance cost, as in the authors' plot
    for ax, (name, paths) in zip(axes, paths_by_agent.items()):
        ax.contour(xs, xs, cost, 12, colors="0.8", linewidths=0.6)
        for g in GOALS:
            ax.add_patch(plt.Circle(g, GOAL_RADIUS, color="tab:red", alpha=0.25))
        for p in paths:
            ax.plot(p[:, 0], p[:, 1], color="tab:blue", alpha=0.35, linewidth=0.8)
        ax.set_xlim(-BOUND, BOUND)
        ax.set_ylim(-BOUND, BOUND)
        ax.set_aspect("equal")
        ax.set_title(f"{name}: {len(paths)} sampled rollouts")
    fig.suptitle(f"multigoal, {steps} training steps, seed {seed}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_results(result: dict, path: Path = RESULTS, key: str = "multigoal") -> None:
    """Read-modify-write: only our key ("multigoal", or a variant's "multigoal_...") changes."""
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = result
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--rollouts", type=int, default=100)
    p.add_argument("--agents", nargs="+", default=["sql", "svg0"], choices=sorted(AGENT_SETTINGS))
    p.add_argument("--set", action="append", default=[], metavar="AGENT:KEY=VALUE", dest="overrides",
                   help="override an agent's setting, e.g. --set sql:reward_scale=1 (repeatable)")
    p.add_argument("--variant", default="", help="write under key multigoal_<VARIANT> and draw no figure")
    p.add_argument("--no-write", action="store_true", help="print only; leave the results file and figure alone")
    args = p.parse_args(argv)
    key = f"multigoal_{args.variant}" if args.variant else "multigoal"
    settings = {name: dict(AGENT_SETTINGS[name]) for name in args.agents}
    for item in args.overrides:
        name, _, pair = item.partition(":")
        setting, sep, value = pair.partition("=")
        if name not in settings or not sep:
            p.error(f"--set expects AGENT:KEY=VALUE with AGENT in {args.agents}, got {item!r}")
        settings[name][setting] = value
    figure = None if args.no_write or args.variant else FIGURE
    result = run_multigoal(args.seeds, args.steps, args.rollouts, args.agents, figure=figure, settings=settings)
    if not args.no_write:
        write_results(result, key=key)
        print(f"wrote {RESULTS.relative_to(ROOT)} (key {key})" + (f" and {FIGURE.relative_to(ROOT)}" if figure else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
