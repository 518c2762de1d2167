"""PlaNet-100k protocol: svg0 against Stable-Baselines3 SAC on the same ``envs.make`` environments.

100k environment steps (counting action repeats) per run; action repeat 8 for cartpole-swingup, 4 for cheetah-run,
reacher-easy and ball_in_cup-catch, 2 for walker-walk and finger-spin. Each run ends with a deterministic evaluation
over 10 episodes. Both agents run in this one invocation, as worker processes on the same machine with the same
budget (one torch thread each), and the throughput breakdown (raw env steps/s, raw learner updates/s) is measured
in this process too.

Resumable: finished runs are kept in the results file and skipped by the next invocation with the same budget and
the same svg0 settings (runs made with other settings are kept in the file but left out of the summary); an svg0
run interrupted mid-way continues from its last checkpoint under ``runs/dmc100k/`` (an interrupted SAC run starts
again). ``--hours H`` starts no new run after H hours, so the protocol can be spread over several invocations.

    python benchmarks/dmc100k.py --seeds 3                    # full protocol (or what is left of it)
    python benchmarks/dmc100k.py --seeds 3 --workers 14       # on a 16-core machine
    python benchmarks/dmc100k.py --budget 20000 --tasks cartpole-swingup --seeds 1 --output /tmp/quick.json
    python benchmarks/dmc100k.py --report                     # rewrite the docs table from the results file

Writes benchmarks/results/dmc100k.json (after every finished run) and the table in docs/benchmarks.md:
``summary[task][agent] = {mean_return, std_return, wall_s, env_steps_per_s, seeds}``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.runs import fail, run_pool  # noqa: E402

TASKS = {"cartpole-swingup": 8, "cheetah-run": 4, "reacher-easy": 4, "ball_in_cup-catch": 4, "walker-walk": 2,
         "finger-spin": 2}
EVAL_EPISODES = 10
RESULTS = ROOT / "benchmarks" / "results" / "dmc100k.json"
DOCS = ROOT / "docs" / "benchmarks.md"


def _eval_seed(seed: int) -> int:
    return 10_000 + seed


def svg0_config(overrides: dict[str, str] | None = None) -> dict:
    """The resolved svg0 settings of a run (library defaults plus ``--svg0-set`` overrides): the agent's config and
    the run's schedule, in the flat layout saved with runs before the schedule and svg0's parts had their own
    sections, so that the runs measured then still count."""
    import dataclasses

    import agents
    from agents.svg0 import SVG0Config

    config, schedule = agents.resolve("svg0", overrides or {})
    nested = dataclasses.asdict(config)
    flat = {k: v for k, v in nested.items() if k not in ("prior", "exploration")}
    for old, new in SVG0Config.MOVED.items():
        section, field = new.split(".")
        flat[old] = nested[section][field]
    return json.loads(json.dumps({**flat, **dataclasses.asdict(schedule)}))


def run_svg0(task: str, repeat: int, seed: int, budget: int, overrides: dict[str, str], run_root: Path) -> dict:
    """One svg0 run in ``run_root/<task>-svg0-<seed>``, continued from its newest checkpoint if one exists."""
    import shutil

    import agents
    from agents import checkpoint
    from agents.loop import RunConfig, Trainer, load_run_config

    run_dir = run_root / f"{task}-svg0-{seed}"
    config, schedule = agents.resolve("svg0", overrides)
    run = RunConfig(env=task, agent="svg0", steps=budget, seed=seed, action_repeat=repeat, device="cpu",
                    logdir=str(run_dir), eval_every=budget, eval_episodes=EVAL_EPISODES,
                    checkpoint_every=max(budget // 10, 1000), log_every=max(budget // 20, 1000), schedule=schedule)
    resume, wall_before = None, 0.0
    if (run_dir / "checkpoints" / "latest").exists():
        try:
            saved_run, saved_config = load_run_config(run_dir)
            if saved_run == run and saved_config == config:
                wall_before = json.loads((run_dir / "wall.json").read_text())["wall_s"]
                resume = checkpoint.latest(run_dir / "checkpoints")
        except (checkpoint.CheckpointError, FileNotFoundError, KeyError, ValueError):
            resume = None
    if resume is None and run_dir.exists():
        shutil.rmtree(run_dir)  # another budget or other settings: start this run afresh
    trainer = Trainer(run, config, resume_from=resume)
    start = time.perf_counter()
    wall_recorder = _WallRecorder(run_dir, wall_before, start)
    wall_recorder.start()
    try:
        result = trainer.train()
    finally:
        wall_recorder.stop()
    wall = wall_before + time.perf_counter() - start
    shutil.rmtree(run_dir)  # finished: the result goes to the results file; replay checkpoints are large
    return {"return": result["eval_return"], "wall_s": wall, "updates": trainer.agent.updates,
            "resumed": resume is not None}


class _WallRecorder:
    """Keeps ``wall.json`` (wall seconds spent on a run so far) up to date, so a resumed run reports its total."""

    def __init__(self, run_dir: Path, before: float, start: float, every: float = 30.0):
        import threading

        self.path, self.before, self.start_time, self.every = run_dir / "wall.json", before, start, every
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"wall_s": self.before + time.perf_counter() - self.start_time}))
        os.replace(tmp, self.path)

    def _loop(self) -> None:
        while not self.done.wait(self.every):
            self._write()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.done.set()


def run_sac(task: str, repeat: int, seed: int, budget: int, overrides: dict[str, str], run_root: Path) -> dict:
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
            "updates": int(model._n_updates), "resumed": False}


RUNNERS = {"svg0": run_svg0, "sac": run_sac}


def job(args: tuple) -> dict:
    import torch

    torch.set_num_threads(1)
    task, agent, seed, budget, overrides, run_root = args
    out = RUNNERS[agent](task, TASKS[task], seed, budget, overrides, Path(run_root))
    out.update(task=task, agent=agent, seed=seed, env_steps=budget, action_repeat=TASKS[task],
               env_steps_per_s=budget / out["wall_s"], settings=settings_of(agent, overrides))
    print(f"[dmc100k] {task} {agent} seed {seed}: return {out['return']:.1f}, {out['wall_s']:.0f} s, "
          f"{out['env_steps_per_s']:.0f} env steps/s", flush=True)
    return out


def settings_of(agent: str, overrides: dict[str, str]) -> dict | str:
    """What identifies a run's agent settings: svg0's resolved config, or SAC's (fixed) SB3 defaults."""
    return svg0_config(overrides) if agent == "svg0" else "sb3-defaults"


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

    config, schedule = agents.resolve("svg0", {})
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
        agent.update(replay.sample(schedule.batch_size))
    svg0_rate = updates / (time.perf_counter() - start)

    flat = gym.wrappers.FlattenObservation(envs.make(task, seed=0, action_repeat=repeat))
    model = SAC("MlpPolicy", flat, seed=0, device="cpu", verbose=0, learning_starts=1000)
    model.learn(1100)
    start = time.perf_counter()
    model.train(gradient_steps=updates, batch_size=model.batch_size)
    sac_rate = updates / (time.perf_counter() - start)
    return {"task": task, "raw_env_steps_per_s": env_rate, "svg0_updates_per_s": svg0_rate,
            "svg0_transitions_per_update": schedule.batch_size * config.sequence_length,
            "svg0_update_every": schedule.update_every,
            "sac_updates_per_s": sac_rate, "sac_transitions_per_update": model.batch_size}


def summarise(runs: list[dict]) -> dict:
    """Per task and agent: mean and std (over seeds) of the final return, mean wall seconds and env steps/s."""
    import numpy as np

    table = {}
    for task in TASKS:
        row = {}
        for agent in RUNNERS:
            rs = [r for r in runs if r["task"] == task and r["agent"] == agent]
            if rs:
                row[agent] = {"mean_return": float(np.mean([r["return"] for r in rs])),
                              "std_return": float(np.std([r["return"] for r in rs])),
                              "wall_s": float(np.mean([r["wall_s"] for r in rs])),
                              "env_steps_per_s": float(np.mean([r["env_steps_per_s"] for r in rs])),
                              "seeds": sorted(r["seed"] for r in rs)}
        table[task] = row
    return table


def targets(summary: dict) -> dict:
    """The issue's targets over the tasks where both agents have runs."""
    both = [row for row in summary.values() if "svg0" in row and "sac" in row]
    if not both:
        return {"tasks_compared": 0}
    wins = sum(row["svg0"]["mean_return"] >= row["sac"]["mean_return"] for row in both)
    svg0_mean = sum(row["svg0"]["mean_return"] for row in both) / len(both)
    sac_mean = sum(row["sac"]["mean_return"] for row in both) / len(both)
    return {"tasks_compared": len(both), "svg0_return_ge_sac_tasks": wins,
            "svg0_mean_return_over_tasks": svg0_mean, "sac_mean_return_over_tasks": sac_mean,
            "return_ratio_svg0_over_sac": svg0_mean / sac_mean if sac_mean else None,
            "wall_ratio_svg0_over_sac": (sum(row["svg0"]["wall_s"] for row in both)
                                         / sum(row["sac"]["wall_s"] for row in both))}


def write_docs(result: dict, docs: Path = DOCS) -> None:
    lines = ["# Benchmarks", "", "## DMC 100k (PlaNet protocol): svg0 vs Stable-Baselines3 SAC", "",
             f"Produced by `{result['command']}` on {result['machine']} ({result['date']}). Budget: "
             f"{result['budget']} environment steps per run (counting action repeats), deterministic evaluation over "
             f"{EVAL_EPISODES} episodes at the end, one torch thread per run, {result['workers']} runs in parallel. "
             "SAC: SB3 defaults (256x256 MLPs, batch 256, one update per step). svg0: the library defaults"
             + (f" with `{result['svg0_overrides']}`" if result.get("svg0_overrides") else "")
             + " (`agents/svg0.py`).", "",
             "| task | repeat | svg0 return | SAC return | svg0 wall s | SAC wall s | svg0 env steps/s | "
             "SAC env steps/s |", "|---|---|---|---|---|---|---|---|"]
    for task, row in result["summary"].items():
        def cell(agent, key):
            if agent not in row:
                return "not run"
            r = row[agent]
            if key == "mean_return":
                return f"{r['mean_return']:.1f} ± {r['std_return']:.1f} (n={len(r['seeds'])})"
            return f"{r[key]:.0f}"
        lines.append(f"| {task} | {TASKS[task]} | {cell('svg0', 'mean_return')} | {cell('sac', 'mean_return')} | "
                     f"{cell('svg0', 'wall_s')} | {cell('sac', 'wall_s')} | {cell('svg0', 'env_steps_per_s')} | "
                     f"{cell('sac', 'env_steps_per_s')} |")
    t = result.get("targets", {})
    if t.get("tasks_compared"):
        lines += ["", f"Tasks with both agents: {t['tasks_compared']} of {len(TASKS)}. svg0 mean return >= SAC's on "
                  f"{t['svg0_return_ge_sac_tasks']}; mean over those tasks svg0 {t['svg0_mean_return_over_tasks']:.1f} "
                  f"vs SAC {t['sac_mean_return_over_tasks']:.1f} (ratio {t['return_ratio_svg0_over_sac']:.2f}); "
                  f"wall-clock per run svg0/SAC {t['wall_ratio_svg0_over_sac']:.2f}."]
    missing = result.get("missing", [])
    if missing:
        lines += ["", f"Still to run ({len(missing)}): " + ", ".join(missing) + ". Rerun the same command: finished "
                  "runs are kept."]
    lines.append("")
    tp = result.get("throughput")
    if tp:
        lines += ["### Throughput breakdown (same process, one thread)", "",
                  f"- raw environment steps/s ({tp['task']}, random actions): {tp['raw_env_steps_per_s']:.0f}",
                  f"- svg0 learner updates/s: {tp['svg0_updates_per_s']:.1f} "
                  f"({tp['svg0_transitions_per_update']} transitions per update, one update every "
                  f"{tp['svg0_update_every']} actor steps)",
                  f"- SAC learner updates/s: {tp['sac_updates_per_s']:.1f} ({tp['sac_transitions_per_update']} "
                  "transitions per update, one update per actor step)", ""]
    docs.parent.mkdir(exist_ok=True)
    text = docs.read_text() if docs.exists() else ""
    marker = "<!-- dmc100k end -->"
    section = "\n".join(lines) + "\n" + marker + "\n"
    if marker in text:
        text = section + text.split(marker, 1)[1].lstrip("\n")
    else:
        text = section + ("\n" + text if text else "")
    docs.write_text(text)


def parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            fail(f"--svg0-set expects key=value, got {item!r}")
        out[key] = value
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=int, default=100_000)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--agents", nargs="+", default=list(RUNNERS), choices=list(RUNNERS))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--hours", type=float, default=None, help="start no new run after this many hours")
    p.add_argument("--svg0-set", nargs="*", default=[], metavar="KEY=VALUE", help="svg0 settings to compare")
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("--docs", type=Path, default=DOCS)
    p.add_argument("--run-root", type=Path, default=ROOT / "runs" / "dmc100k",
                   help="where unfinished svg0 runs keep their checkpoints")
    p.add_argument("--report", action="store_true", help="only rewrite the docs table from --output")
    args = p.parse_args()
    if args.budget < 1 or args.seeds < 1 or args.workers < 1:
        fail("--budget, --seeds and --workers must be positive")
    if args.report:
        write_docs(json.loads(args.output.read_text()), args.docs)
        return
    os.environ.setdefault("MUJOCO_GL", "egl")
    sys.path.insert(0, str(ROOT))
    from agents.config import ConfigError

    overrides = parse_overrides(args.svg0_set)
    try:
        settings = {agent: settings_of(agent, overrides) for agent in RUNNERS}
    except ConfigError as e:
        fail(f"--svg0-set: {e}")

    result = {"runs": []}
    if args.output.exists():
        try:
            result = json.loads(args.output.read_text())
        except json.JSONDecodeError as e:
            fail(f"{args.output} is not valid JSON ({e}); move it away to start afresh")
        if result.get("budget") != args.budget:
            fail(f"{args.output} holds a {result.get('budget')}-step protocol; pass --output "
                             "elsewhere for another budget")

    def current(run: dict) -> bool:  # a run counts only with this invocation's settings
        return run["settings"] == settings[run["agent"]]

    done = {(r["task"], r["agent"], r["seed"]) for r in result["runs"] if current(r)}
    # seed 0 of every task and agent first, so a partial protocol already compares everything once
    wanted = [(task, agent, seed) for seed in range(args.seeds) for task in args.tasks for agent in args.agents]
    jobs = [(task, agent, seed, args.budget, overrides, str(args.run_root))
            for task, agent, seed in wanted if (task, agent, seed) not in done]
    result.update({"command": "python " + " ".join(["benchmarks/dmc100k.py", *sys.argv[1:]]),
                   "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
                   "date": time.strftime("%Y-%m-%d"), "budget": args.budget, "seeds": args.seeds,
                   "workers": args.workers, "eval_episodes": EVAL_EPISODES, "svg0_overrides": " ".join(args.svg0_set),
                   "svg0_settings": settings["svg0"]})

    def save() -> None:
        runs = [r for r in result["runs"] if current(r)]
        finished = {(r["task"], r["agent"], r["seed"]) for r in runs}
        result["summary"] = summarise(runs)
        result["targets"] = targets(result["summary"])
        result["missing"] = [f"{t} {a} seed {s}" for t, a, s in wanted if (t, a, s) not in finished]
        args.output.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.output.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, args.output)
        write_docs(result, args.docs)

    print(f"[dmc100k] {len(done & set(wanted))} of {len(wanted)} runs already finished; {len(jobs)} to run",
          flush=True)
    if result.get("throughput", {}).get("svg0_settings") != settings["svg0"]:  # measured for these settings
        result["throughput"] = {**throughput(), "svg0_settings": settings["svg0"]}
        print(f"[dmc100k] throughput: {result['throughput']}", flush=True)
    save()
    def finished(run: dict) -> None:
        result["runs"].append(run)
        save()

    run_pool(job, jobs, args.workers, args.hours, finished, "dmc100k")
    print(json.dumps({"summary": result["summary"], "targets": result["targets"],
                      "missing": len(result["missing"])}, indent=1))


if __name__ == "__main__":
    main()
