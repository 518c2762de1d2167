"""Exploration experiments (issue #7; seed 004 §4, C11-C14 in ../shared/research/seed004.md).

    python benchmarks/exploration.py --experiment 1                    # DeepSea, the full protocol (~65 min, 1 core)
    python benchmarks/exploration.py --experiment 1 --sizes 10 --seeds 0 --episodes 100 --no-write   # a quick look
    python benchmarks/exploration.py --experiment 3                    # multigoal (benchmarks/exploration_multigoal.py)

Experiment 1 -- deep exploration on DeepSea (envs/deep_sea.py, bsuite's definition): the ``dqn`` agent
(agents/dqn.py) with ``exploration`` = epsilon / noisy / bootstrap / ucb on deep-sea-N for N = 10, 14, 20, 30 and
seeds 0, 1, 2 (seed s: torch seed s and action mapping ``mapping_seed = s``). The agent is driven directly in a
loop -- SequenceReplay (agents/replay.py) with one-step sequences, one learner update per step after
``learning_starts`` -- without the trainer's TensorBoard/evaluation machinery, to stay fast. Measured per run:
the episode of the first +1 (``first_reward_episode``, 1-based, null if never) and the fraction of episodes that
earned it, within a fixed episode budget per size (``EPISODES``; planned as ~45 minutes of one core, it took
64 on the shared machine; see the JSON's ``protocol``). The agent settings are the dqn defaults
(``BENCH_OVERRIDES`` is empty; a batch of 32 instead of 128 halved the cost but left bootstrap unsolved on
deep-sea-10 for 2 of 3 seeds within 200 episodes). Expected from the literature (Osband et al. 2018,
bsuite): epsilon-greedy needs ~2^N episodes and fails beyond small N; bootstrapped DQN with randomised priors
scales gracefully in N. What this sweep found: docs/exploration.md.

Experiment 2 -- svg0 with exploration = none / noisy / bootstrap / ucb on cartpole-swingup_sparse and
ball_in_cup-catch at equal steps (benchmarks/exploration_control.py; key "sparse_control"; ``--report`` redraws
docs/img/exploration_sparse_control.png and the table from the results file).

Experiment 3 -- multigoal: ``run_multigoal()`` from benchmarks/exploration_multigoal.py (key "multigoal").

Results go to benchmarks/results/exploration.json, one key per experiment ("deep_sea", "sparse_control",
"multigoal"); the file is read, one key replaced and written back, so the experiments leave each other alone.
Experiment 1 also writes docs/img/exploration_deep_sea.png.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results" / "exploration.json"
DEEP_SEA_FIGURE = ROOT / "docs" / "img" / "exploration_deep_sea.png"
DOCS = ROOT / "docs" / "exploration.md"
SIZES = (10, 14, 20, 30)
SEEDS = (0, 1, 2)
METHODS = ("epsilon", "noisy", "bootstrap", "ucb", "thompson")
EPISODES = {10: 300, 14: 300, 20: 400, 30: 200}  # episodes per size; the sweep took ~75 min of a shared core
BENCH_OVERRIDES: dict[str, str] = {}  # the dqn defaults (batch 32 was cheaper but learned too slowly)


def write_key(key: str, value, path: Path | None = None) -> None:
    """Replace ``key`` of the results JSON, keeping every other experiment's key."""
    path = path or RESULTS
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


# -- experiment 1: DeepSea ---------------------------------------------------------------------------------------
def run_deep_sea(size: int, method: str, seed: int, episodes: int, overrides: dict[str, str] | None = None,
                 stop_after_first: bool = False) -> dict:
    """Train ``dqn`` with ``exploration=method`` on deep-sea-``size`` for ``episodes`` episodes.

    Returns the per-episode "earned the +1" flags and the summary numbers. ``stop_after_first`` ends the run at
    the first rewarded episode (for tests)."""
    import torch

    import agents
    import envs
    from agents.observations import ObsLayout
    from agents.replay import SequenceReplay

    torch.manual_seed(seed)
    env = envs.make(f"deep-sea-{size}", seed=seed, mapping_seed=seed)
    layout = ObsLayout(env.observation_space)
    config, schedule = agents.resolve("dqn", {**BENCH_OVERRIDES, **(overrides or {}), "exploration": method})
    agent = agents.make("dqn", env.observation_space, env.action_space, config)
    replay = SequenceReplay(schedule.replay_capacity, layout.dim, 1, config.sequence_length,
                            np.random.default_rng(seed))
    rewarded, steps, start = [], 0, time.perf_counter()
    for _ in range(episodes):
        obs, _ = env.reset()
        flat = layout.flatten(obs)
        replay.start_episode(flat)
        agent.begin_episode()
        done, got_goal = False, False
        while not done:
            action, log_prob = agent.act(flat)
            obs, reward, terminated, truncated, _ = env.step(action)
            flat = layout.flatten(obs)
            done = terminated or truncated
            replay.add(action, log_prob, reward, terminated, flat, done)
            got_goal |= reward > 0.5  # the +1 (move costs are 0.01/N)
            steps += 1
            for _ in range(schedule.updates_between(steps - 1, steps)):
                agent.update(replay.sample(schedule.batch_size))
                agent.refresh(replay, steps)
        rewarded.append(got_goal)
        if stop_after_first and got_goal:
            break
    first = next((i + 1 for i, r in enumerate(rewarded) if r), None)
    return {"size": size, "method": method, "seed": seed, "episodes": len(rewarded),
            "first_reward_episode": first, "fraction_rewarded": float(np.mean(rewarded)),
            "rewarded_per_50_episodes": [int(sum(rewarded[i:i + 50])) for i in range(0, len(rewarded), 50)],
            "updates": agent.updates, "wall_s": round(time.perf_counter() - start, 1)}


def summarise_deep_sea(runs: list[dict]) -> dict:
    """Per (method, size): how many seeds found the reward, median first-reward episode (budget + 1 counts a
    miss), mean fraction of rewarded episodes."""
    table: dict[str, dict[str, dict]] = {}
    for run in runs:
        table.setdefault(run["method"], {}).setdefault(str(run["size"]), []).append(run)
    out = {}
    for method, by_size in table.items():
        out[method] = {}
        for size, rs in by_size.items():
            firsts = [r["first_reward_episode"] if r["first_reward_episode"] is not None else r["episodes"] + 1
                      for r in rs]
            out[method][size] = {"seeds": len(rs), "seeds_rewarded": sum(r["first_reward_episode"] is not None
                                                                          for r in rs),
                                 "median_first_reward_episode": float(np.median(firsts)),
                                 "mean_fraction_rewarded": float(np.mean([r["fraction_rewarded"] for r in rs]))}
    return out


def plot_deep_sea(result: dict, path: Path | None = None) -> None:
    path = path or DEEP_SEA_FIGURE
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary, sizes = result["summary"], result["protocol"]["sizes"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for i, (method, by_size) in enumerate(summary.items()):
        xs = [n for n in sizes if str(n) in by_size]
        line, = left.plot(xs, [by_size[str(n)]["median_first_reward_episode"] for n in xs], "o-", label=method)
        seeds = [(r["size"] + 0.25 * (i - 1.5), r["first_reward_episode"]) for r in result["runs"]
                 if r["method"] == method and r["first_reward_episode"] is not None]
        if seeds:  # every seed that found the reward, slightly offset per method
            left.plot(*zip(*seeds), ".", color=line.get_color(), alpha=0.5)
        right.plot(xs, [by_size[str(n)]["mean_fraction_rewarded"] for n in xs], "o-", label=method)
    budget = result["protocol"]["episodes"]
    left.plot(sizes, [budget[str(n)] + 1 for n in sizes], "k:", label="budget + 1 (never)")
    left.set(xlabel="DeepSea size N", ylabel="episodes to first reward (median; dots: seeds)", yscale="log")
    right.set(xlabel="DeepSea size N", ylabel="fraction of episodes rewarded (mean over seeds)", ylim=(-0.02, 1))
    left.legend()
    fig.suptitle(f"DeepSea, dqn exploration variants, seeds {result['protocol']['seeds']}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def deep_sea_table(result: dict) -> str:
    """Markdown: per method and size, seeds that found the reward, median first-reward episode, mean fraction."""
    sizes, summary = result["protocol"]["sizes"], result["summary"]
    budget = result["protocol"]["episodes"]
    lines = ["| method | " + " | ".join(f"N={n} ({budget[str(n)]} ep.)" for n in sizes) + " |",
             "|---|" + "---|" * len(sizes)]
    for method, by_size in summary.items():
        cells = []
        for n in sizes:
            s = by_size.get(str(n))
            if s is None:
                cells.append("-")
                continue
            median = s["median_first_reward_episode"]
            first = f"{median:.0f}" if median <= budget[str(n)] else "never"
            cells.append(f"{s['seeds_rewarded']}/{s['seeds']} seeds; first {first}; "
                         f"rewarded {s['mean_fraction_rewarded']:.2f}")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def replace_block(path: Path, name: str, text: str) -> bool:
    """Replace the text between ``<!-- name start -->`` and ``<!-- name end -->`` in ``path`` (if both exist)."""
    if not path.exists():
        return False
    doc = path.read_text()
    start, end = f"<!-- {name} start -->", f"<!-- {name} end -->"
    if start not in doc or end not in doc:
        return False
    head, rest = doc.split(start, 1)
    path.write_text(head + start + "\n" + text + "\n" + end + rest.split(end, 1)[1])
    return True


def run_experiment_1(sizes=SIZES, seeds=SEEDS, methods=METHODS, episodes: dict[int, int] | None = None,
                     write: bool = True, overrides: dict[str, str] | None = None) -> dict:
    """Run the sweep. With ``write``, runs already in the results file are kept unless this invocation measures
    their size and method again (so sizes and methods can be run by separate invocations); a size run with another
    episode budget replaces that size's runs of every method."""
    import torch

    torch.set_num_threads(1)
    episodes = {n: (episodes or EPISODES).get(n, EPISODES.get(n, 300)) for n in sizes}
    previous = json.loads(RESULTS.read_text()).get("deep_sea") if write and RESULTS.exists() else None
    kept = [r for r in (previous or {}).get("runs", []) if r["size"] not in sizes
            or (r["method"] not in methods and r["episodes"] == episodes[r["size"]])]
    budget = {**{str(r["size"]): r["episodes"] for r in kept}, **{str(n): episodes[n] for n in sizes}}
    all_sizes = sorted({r["size"] for r in kept} | set(sizes))
    command = " ".join(["python", "benchmarks/exploration.py", *sys.argv[1:]])
    earlier = (previous or {}).get("commands") or ([previous["command"]] if previous and "command" in previous else [])
    commands = (earlier if kept else []) + [command]
    all_methods = [m for m in METHODS if m in methods or any(r["method"] == m for r in kept)]
    protocol = {"sizes": all_sizes, "seeds": list(seeds), "methods": all_methods,
                "episodes": {str(n): budget[str(n)] for n in all_sizes}, "agent_overrides": BENCH_OVERRIDES,
                "note": "seed s = torch seed s and DeepSea mapping_seed s; one learner update per step"}
    runs: list[dict] = []
    result: dict = {}
    for size in sizes:
        for seed in seeds:
            for method in methods:
                run = run_deep_sea(size, method, seed, episodes[size], overrides)
                runs.append(run)
                print(f"deep-sea-{size} {method:9s} seed {seed}: first reward at episode "
                      f"{run['first_reward_episode']}, rewarded {run['fraction_rewarded']:.2f} ({run['wall_s']} s)",
                      flush=True)
                every = sorted(kept + runs, key=lambda r: (r["size"], r["seed"], METHODS.index(r["method"])))
                result = {"commands": commands,
                          "machine": f"{platform.processor() or platform.machine()}, 1 torch thread",
                          "date": time.strftime("%Y-%m-%d"), "protocol": protocol,
                          "summary": summarise_deep_sea(every), "runs": every}
                if write:  # after every run, so an interrupted sweep keeps what it measured
                    write_key("deep_sea", result)
    print(deep_sea_table(result))
    if write:
        plot_deep_sea(result)
        replace_block(DOCS, "deep_sea", deep_sea_table(result))
    return result


# -- experiment 2: svg0 variants on sparse continuous control -----------------------------------------------------
def run_experiment_2(seeds=SEEDS, write: bool = True, report: bool = False) -> dict:
    """svg0 exploration variants on sparse continuous-control tasks (benchmarks/exploration_control.py), results
    under key "sparse_control" (written after every run); ``report`` only redraws the figure and table."""
    from benchmarks import exploration_control as control  # imported only when asked for

    if report:
        result = json.loads(RESULTS.read_text())["sparse_control"]
        control.plot(result["runs"], result["protocol"]["steps"])
    else:
        result = control.run_sparse_control(seeds=tuple(seeds),
                                            on_run=(lambda r: write_key("sparse_control", r)) if write else None)
    table = control.table(result["summary"])
    print(table)
    if write or report:
        replace_block(DOCS, "sparse_control", table)
    return result


# -- experiment 3: multigoal -------------------------------------------------------------------------------------
def run_experiment_3(write: bool = True) -> dict:
    from benchmarks.exploration_multigoal import run_multigoal  # imported only when asked for

    result = run_multigoal()
    if write:
        write_key("multigoal", result)
    return result


def _int_list(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", type=int, choices=(1, 2, 3), required=True)
    p.add_argument("--sizes", type=_int_list, default=list(SIZES), help="experiment 1: DeepSea sizes, e.g. 10,20")
    p.add_argument("--seeds", type=_int_list, default=list(SEEDS), help="experiment 1: seeds, e.g. 0,1,2")
    p.add_argument("--methods", type=lambda s: s.split(","), default=list(METHODS),
                   help="experiment 1: exploration methods, e.g. epsilon,bootstrap")
    p.add_argument("--episodes", type=int, help="experiment 1: one episode budget for every size "
                                                "(default: the per-size budget EPISODES)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="experiment 1: override a dqn setting for an ablation (use with --no-write), e.g. mask_prob=1")
    p.add_argument("--no-write", action="store_true", help="print only; leave the results file and figure alone")
    p.add_argument("--report", action="store_true",
                   help="experiments 1, 2: redraw the figure and the docs table from the results file, run nothing")
    args = p.parse_args(argv)
    if args.experiment == 1 and args.report:
        result = json.loads(RESULTS.read_text())["deep_sea"]
        plot_deep_sea(result)
        replace_block(DOCS, "deep_sea", deep_sea_table(result))
        print(deep_sea_table(result))
        return 0
    if args.experiment == 1:
        unknown = sorted(set(args.methods) - set(METHODS))
        if unknown or any(n < 1 for n in args.sizes):
            p.error(f"unknown methods {unknown} (choose from {', '.join(METHODS)}) or a size < 1")
        episodes = {n: args.episodes for n in args.sizes} if args.episodes else None
        overrides = dict(pair.split("=", 1) for pair in args.overrides if "=" in pair)
        if len(overrides) != len(args.overrides) or (overrides and not args.no_write):
            p.error("--set takes KEY=VALUE and is for ablations printed with --no-write (the results file holds "
                    "the default protocol)")
        from agents.config import ConfigError

        try:
            run_experiment_1(args.sizes, args.seeds, args.methods, episodes, write=not args.no_write,
                             overrides=overrides)
        except ConfigError as e:
            p.error(str(e))
    elif args.experiment == 2:
        run_experiment_2(args.seeds, write=not args.no_write, report=args.report)
    else:
        run_experiment_3(write=not args.no_write)
    if not args.no_write:
        print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
