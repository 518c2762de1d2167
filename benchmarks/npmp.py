"""NPMP reuse (seed 000 §8.4, Fig 8.6a): a high-level svg0 policy over frozen primitives against svg0 from scratch.

Conditions, all on ``humanoid`` (the CMU humanoid, a target that moves after the walker has stayed near it; sparse
reward 1 per step within 1 m) or, with ``--env humanoid-speed``, on the dense reuse task of Fig 8.6b (follow a
randomly changing target speed), ≥ 3 seeds each, identical svg0 settings (``COMMON``):
- ``svg0 scratch``: svg0 acting on the 56 actuators directly;
- ``npmp beta=0.1``: ``--agent npmp`` on the shipped primitives (data/primitives/npmp, beta = 0.1);
- ``npmp beta=0.001``: ``--agent npmp`` on primitives distilled from the same data with beta = 0.001 (the thesis's
  "very weakly regularised" module; shipped in data/primitives/npmp-beta0.001, made by ``python -m pipelines.npmp
  distill --beta 0.001`` on the shipped primitives' data; another path with ``--weak``);
- ``npmp_clips`` (not by default): ``--agent npmp-clips``, DQN choosing which clip the primitives follow next
  (a departure from the thesis's latent high level), on the shipped clip primitives (data/primitives/npmp-clips;
  another path with ``--clip-primitives``), with that agent's own defaults rather than ``COMMON`` (hindsight goals
  among them since 2026-11-30: runs recorded before are in benchmarks/results/npmp_clips_60k.json);
- ``npmp beta=1``: primitives distilled from the same data with beta = 1 (data/primitives/npmp-beta1; another path
  with ``--strong``), whose decoder keeps the humanoid up longest under latents no clip produced
  (benchmarks/npmp_prior_samples.py).
Each npmp condition's primitives must have been distilled with the beta its name gives (checked).
The thesis: reuse learns an order of magnitude faster than scratch, and the beta = 0.1 module trains faster and
falls less than beta = 0.001 (median over 10 seeds). Reported per condition: steps for the mean of the last
``WINDOW`` training returns to reach ``THRESHOLDS[env]``, final training return, evaluation return, mean episode length
(steps before a fall; the episode limit is 25 s = 833 steps), targets reached per episode (``task/targets_reached``),
fraction of episodes
ending in a fall (``train/fell``, over all and over the last ``WINDOW`` episodes), on humanoid-speed the speed error
of the first and last episodes (``task/speed_error``), and the last latent statistics.

Each npmp run records the checksum of its primitives, and every run how the task's episodes start (``start``; runs
recorded before 2026-11-25 started standing); a rerun drops (and runs again) runs made on other primitives or from
another start. The results for the svg0-distilled primitives shipped until 2026-11-23 are kept in
benchmarks/results/npmp_svg0_primitives.json.

The pipeline's own numbers (experts' relative returns from ``python -m pipelines.npmp report-experts``, one-shot
imitation on training and held-out clips and the latent-optimisation diagnostic from ``python -m pipelines.npmp
evaluate``) are read from their JSON reports in ``--pipeline-dir`` and copied into the same results file, so
benchmarks/results/npmp.json holds every NPMP number.

    python benchmarks/npmp.py                                   # 3 seeds x 3 conditions, 2 worker processes
    python benchmarks/npmp.py --steps 2000 --seeds 0 --conditions scratch   # a quick look
    python benchmarks/npmp.py --report                          # rebuild the summary from finished runs
    # the dense reuse task (Fig 8.6b), in its own results file and run directories:
    python benchmarks/npmp.py --env humanoid-speed --steps 50000 --conditions scratch npmp_beta_0.1 --output benchmarks/results/npmp_speed.json
    # the high-level action as the AR(1) prior's innovation, z_{t-1} observed (agents/npmp.py latent_mode):
    python benchmarks/npmp.py --steps 150000 --conditions npmp_innovation_beta_0.1 npmp_innovation_kl_beta_0.1 --workdir runs/npmp_benchmark_150k --output benchmarks/results/npmp_innovation_150k.json
    # the headline task with 5 per metre of progress towards the target (envs/locomotion.py; not the thesis's reward):
    python benchmarks/npmp.py --env humanoid-progress --steps 150000 --seeds 0 1 --conditions npmp_innovation_kl_beta_0.1 --workdir runs/npmp_shaped --output benchmarks/results/npmp_progress_150k.json
    # ten times the budget (about 15 min per run):
    python benchmarks/npmp.py --steps 150000 --conditions scratch npmp_beta_0.1 --workdir runs/npmp_benchmark_150k --output benchmarks/results/npmp_150k.json
    # the clip high level with its defaults (hindsight goals), each last policy then greedy on 40 fresh episodes:
    python benchmarks/npmp.py --steps 60000 --seeds 0 1 2 3 4 5 --workers 1 --conditions npmp_clips --greedy-episodes 40 --workdir runs/npmp_benchmark_clips_hindsight --output benchmarks/results/npmp_clips_hindsight_60k.json
    # 10 N for the clip high level's N = 60 000 (about an hour a seed; runs over CHECKPOINT_EVERY steps checkpoint
    # as they go, and a rerun of the same command continues a stopped run and skips finished ones):
    python benchmarks/npmp.py --steps 600000 --seeds 0 1 2 --workers 1 --conditions scratch --workdir runs/npmp_benchmark_600k --output benchmarks/results/npmp_600k.json
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.runs import read_series, run_jobs, steps_to_threshold, train_and_read, write_json  # noqa: E402
from agents.npmp import CLIP_PRIMITIVES  # noqa: E402
from priors.npmp import DEFAULT_PRIMITIVES  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "npmp.json"
ENV = "humanoid"
WINDOW = 10
# the training return (mean of the last WINDOW episodes) a run must reach: on humanoid, 10 steps spent within 1 m
# of the target in one episode; on humanoid-speed (reward <= 1 per step), 100, i.e. at least 100 steps (3 s) up
# the headline task with dense terms (envs/locomotion.py ALIASES): none, since their returns also count the approach
# or the steps survived; the targets reached are the measure to compare there
THRESHOLDS = {"humanoid": 10.0, "humanoid-progress": None, "humanoid-alive": None, "humanoid-shaped": None,
              "humanoid-speed": 100.0}
# Budget-driven svg0 settings shared by every condition (the thesis gives no HL-policy setup).
CHECKPOINT_EVERY = 100_000   # longer runs checkpoint as they go; a stopped one continues where it was on a rerun
COMMON = {"hidden": "128,128", "update_every": "4", "learning_starts": "1000"}
TAGS = ("train/fell", "latent/abs_mean", "latent/std", "task/targets_reached", "task/speed_error",
        "train/episode_length")


def conditions(weak_primitives: Path, strong_primitives: Path, clip_primitives: Path) -> dict[str, tuple[str, dict]]:
    return {"scratch": ("svg0", {}),
            # a high level that chooses clips (DQN, agents/npmp.py npmp-clips; a departure from §8.4's latent high
            # level) over primitives taught the 16_27 walking turns and their chains; its own measured defaults,
            # not COMMON's svg0 settings
            "npmp_clips": ("npmp-clips", {"primitives": str(clip_primitives)}),
            "npmp_beta_0.1": ("npmp", {}),
            "npmp_beta_0.001": ("npmp", {"primitives": str(weak_primitives)}),
            "npmp_beta_1": ("npmp", {"primitives": str(strong_primitives)}),
            # the shipped beta = 0.1 primitives driven through the AR(1) prior's innovation (priors/reuse.py)
            "npmp_innovation_beta_0.1": ("npmp", {"latent_mode": "innovation", "latent_scale": "2"}),
            # ... and KL-regularised (eq 7.2) towards N(0, 0.65^2) pre-squash: 2 tanh(u) then has about the prior's
            # N(0, 1) innovations (agents/behaviour_prior.py, prior=normal)
            "npmp_innovation_kl_beta_0.1": ("npmp", {"latent_mode": "innovation", "latent_scale": "2",
                                                     "prior": "normal", "prior.std": "0.65"}),
            # ... without svg0's entropy bonus, whose alpha * H inflated the critic (docs/npmp.md)
            "npmp_innovation_kl_noent_beta_0.1": ("npmp", {"latent_mode": "innovation", "latent_scale": "2",
                                                           "prior": "normal", "prior.std": "0.65",
                                                           "entropy_auto": "false", "entropy_coef": "0"})}


def condition_beta(name: str) -> float | None:
    """The beta an npmp condition's name promises (checked against its primitives' own)."""
    return float(name.rpartition("_beta_")[2]) if "_beta_" in name else None


def primitives_of(agent: str, overrides: dict) -> str | None:
    """The checksum of the primitives an npmp run acts through (None for scratch): a run made on other primitives
    (say, before the shipped ones were replaced) is not reused."""
    if agent not in ("npmp", "npmp-clips"):
        return None
    meta = json.loads((Path(overrides.get("primitives", DEFAULT_PRIMITIVES)) / "meta.json").read_text())
    return meta["sha256"]["weights.safetensors"]


def task_start(env: str) -> str:
    """How the task's episodes start (envs/locomotion.py): runs made on another start are another task."""
    from envs.locomotion import ALIASES

    return ALIASES[env][1].get("start", "stand")


def _job(args):
    key, env, agent, seed, steps, overrides, logdir = args
    print(f"start {key}", flush=True)
    settings = overrides if agent == "npmp-clips" else {**COMMON, **overrides}   # COMMON is svg0's
    record = train_and_read(env, agent, seed, steps, settings, Path(logdir), tags=TAGS,
                            checkpoint_every=CHECKPOINT_EVERY if steps > CHECKPOINT_EVERY else None)
    record["primitives_sha256"] = primitives_of(agent, overrides)
    record["start"] = task_start(env)
    print(f"done  {key}: eval {record['eval_return']:.1f} in {record['wall_s']:.0f} s", flush=True)
    return key, record


def logdir_of(workdir: Path, name: str, seed: int, steps: int, env: str = ENV) -> Path:
    task = "" if env == ENV else f"{env}-"   # the headline task's runs keep the names they were made with
    return workdir / f"{task}{name}-seed{seed}-steps{steps}"


def episode_lengths(record: dict, logdir: Path) -> list[float]:
    """Steps before a fall (or the 25 s limit) per episode: kept with the run, or read back from its events for runs
    recorded before they were kept; empty (reported as None) where neither is left."""
    if "train/episode_length" in record["series"]:
        return [v for _, v in record["series"]["train/episode_length"]]
    return [v for _, v in read_series(logdir, "train/episode_length")] if logdir.is_dir() else []


GREEDY_SEED = 50_000   # --greedy-episodes: fresh episodes, none of training's or evaluation's


def greedy_episodes(logdir: Path, episodes: int) -> dict:
    """A finished run's last policy, acting greedily (deterministic) on ``episodes`` fresh episodes: targets reached
    per episode and the median episode length in control steps (the run's own end-of-run evaluation is 5 episodes,
    too few to tell 0.1 target per episode from 0)."""
    from agents.loop import load_run_config, load_trained_agent, make_run_env, play_episode
    from agents.observations import ObsLayout

    run, agent_config = load_run_config(logdir)
    env = make_run_env(run.env, run.action_repeat, run.agent, agent_config, "cpu", GREEDY_SEED)
    try:
        _, _, agent, step = load_trained_agent(logdir, env.observation_space, env.action_space)
        layout, reached, lengths = ObsLayout(env.observation_space), [], []
        for episode in range(episodes):
            _, length, info = play_episode(agent, env, layout, GREEDY_SEED + episode,
                                           steps_per_action=run.action_repeat)
            reached.append(float(info.get("episode_metrics", {}).get("task/targets_reached", 0.0)))
            lengths.append(length)
    finally:
        env.close()
    return {"episodes": episodes, "at_env_step": step, "targets_per_episode": round(float(np.mean(reached)), 4),
            "episodes_with_a_target": int(np.sum(np.array(reached) > 0)), "median_steps": float(np.median(lengths))}


def summarise(runs: dict, names: list[str], seeds: list[int], steps: int, workdir: Path,
              threshold: float | None) -> dict:
    out = {}
    for name in names:
        done = [s for s in seeds if f"{name}|seed={s}|steps={steps}" in runs]
        records = [runs[f"{name}|seed={s}|steps={steps}"] for s in done]
        if not records:
            continue
        lengths = [episode_lengths(r, logdir_of(workdir, name, s, steps, r.get("env", ENV)))
                   for r, s in zip(records, done)]
        reached = [None if threshold is None else steps_to_threshold(r["curve"], threshold, WINDOW) for r in records]
        final = [float(np.mean([v for _, v in r["curve"][-WINDOW:]])) if r["curve"] else float("nan")
                 for r in records]
        falls = [[v for _, v in r["series"].get("train/fell", [])] for r in records]
        targets = [[v for _, v in r["series"].get("task/targets_reached", [])] for r in records]
        speed_errors = [[v for _, v in r["series"].get("task/speed_error", [])] for r in records]
        out[name] = {"seeds": len(records), "threshold": threshold, "steps_to_threshold": reached,
                     "reached_threshold": sum(r is not None for r in reached),
                     "final_train_return_mean": float(np.mean(final)), "final_train_return_std": float(np.std(final)),
                     "eval_return_mean": float(np.mean([r["eval_return"] for r in records])),
                     "eval_return_std": float(np.std([r["eval_return"] for r in records])),
                     "episodes_mean": float(np.mean([r["episodes"] for r in records])),
                     "episode_length_mean": [round(float(np.mean(n)), 2) if n else None for n in lengths],
                     "episode_length_last": [round(float(np.mean(n[-WINDOW:])), 2) if n else None for n in lengths],
                     # train/fell is 0/1 per episode: the fraction of falls over all and over the last episodes
                     "fell_fraction": [round(float(np.mean(f)), 4) if f else None for f in falls],
                     "fell_fraction_last": [round(float(np.mean(f[-WINDOW:])), 4) if f else None for f in falls],
                     # targets reached per episode (held for 10 steps): what a user watches
                     "targets_reached_total": [int(sum(t)) for t in targets],
                     "targets_reached_per_episode_last": [round(float(np.mean(t[-WINDOW:])), 3) if t else None
                                                          for t in targets],
                     # humanoid-speed: the episode's mean |speed - target speed| (m/s), first and last episodes
                     "speed_error_first": [round(float(np.mean(e[:WINDOW])), 3) if e else None for e in speed_errors],
                     "speed_error_last": [round(float(np.mean(e[-WINDOW:])), 3) if e else None for e in speed_errors],
                     "latent_abs_mean_last": [r["last"].get("latent/abs_mean") for r in records],
                     # --greedy-episodes: the last policy on fresh episodes
                     "greedy_targets_per_episode": [r.get("greedy", {}).get("targets_per_episode") for r in records],
                     "wall_s_mean": float(np.mean([r["wall_s"] for r in records]))}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", choices=sorted(THRESHOLDS), default=ENV,
                   help="the reuse task: humanoid (a moving target, sparse) or humanoid-speed (a target speed, dense)")
    p.add_argument("--steps", type=int, default=10_000, help="environment steps per run")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--conditions", nargs="+", default=["scratch", "npmp_beta_0.1", "npmp_beta_0.001"])
    p.add_argument("--weak", type=Path, default=ROOT / "data" / "primitives" / "npmp-beta0.001",
                   help="primitives distilled with beta = 0.001")
    p.add_argument("--strong", type=Path, default=ROOT / "data" / "primitives" / "npmp-beta1",
                   help="primitives distilled with beta = 1")
    p.add_argument("--clip-primitives", type=Path, default=CLIP_PRIMITIVES,
                   help="npmp_clips: primitives taught the clips the high level chooses")
    p.add_argument("--pipeline-dir", type=Path, default=ROOT / "runs" / "npmp",
                   help="where the pipeline's reports are: experts.json (report-experts) and report*.json "
                        "(evaluate: one-shot imitation and latent optimisation per primitives)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--workdir", type=Path, default=ROOT / "runs" / "npmp_benchmark")
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("--report", action="store_true", help="only rebuild the summary from finished runs")
    p.add_argument("--greedy-episodes", type=int, default=0, metavar="N",
                   help="also run each finished run's last policy greedily on N fresh episodes (kept with the run); a "
                        "run recorded without them whose directory is gone is trained again")
    args = p.parse_args(argv)

    if args.greedy_episodes < 0:
        p.error(f"--greedy-episodes must be >= 0, got {args.greedy_episodes}")
    specs = conditions(args.weak, args.strong, args.clip_primitives)
    unknown = [c for c in args.conditions if c not in specs]
    if unknown:
        p.error(f"unknown condition(s) {unknown}; choose from {list(specs)}")
    for name in [] if args.report else args.conditions:   # a condition's primitives must have the beta it names
        agent, overrides = specs[name]
        if agent == "npmp-clips" and not (Path(overrides["primitives"]) / "meta.json").is_file():
            p.error(f"no primitives at {overrides['primitives']} for {name} (--clip-primitives)")
        if agent != "npmp":
            continue
        path = Path(overrides.get("primitives", DEFAULT_PRIMITIVES))
        try:
            beta = json.loads((path / "meta.json").read_text())["config"]["beta"]
        except (OSError, ValueError, KeyError, TypeError):
            p.error(f"no readable primitives at {path} for {name} "
                    f"(python -m pipelines.npmp distill --beta {condition_beta(name):g} --out ...)")
        if beta != condition_beta(name):
            p.error(f"{name} needs primitives distilled with beta = {condition_beta(name):g}; {path} has {beta}")
    header = {"command": "python benchmarks/npmp.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "env": args.env, "steps": args.steps, "seeds": args.seeds, "common_settings": COMMON,
              "window": WINDOW, "threshold": THRESHOLDS[args.env],
              "machine": f"{platform.processor() or platform.machine()}, {mp.cpu_count()} cores, "
                         f"{args.workers} worker processes, one torch thread each"}
    previous = json.loads(args.output.read_text()) if args.output.exists() else {}
    if args.report and previous and previous.get("steps") != args.steps:   # a rebuild must keep the runs it reads
        p.error(f"{args.output} holds runs of {previous.get('steps')} steps, not {args.steps}: pass --steps "
                f"{previous.get('steps')}")
    runs = previous.get("runs", {}) if previous.get("steps") == args.steps else {}
    jobs = [(f"{name}|seed={seed}|steps={args.steps}", args.env, *specs[name][:1], seed, args.steps, specs[name][1],
             str(logdir_of(args.workdir, name, seed, args.steps, args.env)))
            for name in args.conditions for seed in args.seeds]
    if not args.report:   # runs on other primitives, tasks or starts than now are run again
        for key, env, agent, _, _, overrides, logdir in jobs:
            if key in runs and (runs[key].get("primitives_sha256") != primitives_of(agent, overrides)
                                or runs[key].get("env", ENV) != env
                                or runs[key].get("start", "stand") != task_start(env)):
                print(f"{key}: made on other primitives, another task or from another start, run again",
                      flush=True)
                del runs[key]
                shutil.rmtree(logdir, ignore_errors=True)
        def lacks_greedy(key: str) -> bool:   # a recorded run without the greedy evaluation asked for
            return bool(args.greedy_episodes) and key in runs and \
                runs[key].get("greedy", {}).get("episodes") != args.greedy_episodes

        # such a run whose directory (its policy) is gone, e.g. on another machine: trained again with the same
        # seed, its record kept until the new one lands
        again = frozenset(key for key, *_, logdir in jobs if lacks_greedy(key) and not Path(logdir).is_dir())
        for key in sorted(again):
            print(f"{key}: no greedy evaluation of {args.greedy_episodes} episodes and no run directory to make one "
                  "from: run again", flush=True)
        run_jobs(_job, jobs, args.workers, runs, args.output, header, again)
        for key, *_, logdir in jobs:   # kept per run: a rerun measures only what is missing
            if lacks_greedy(key) and Path(logdir).is_dir():
                runs[key]["greedy"] = greedy_episodes(Path(logdir), args.greedy_episodes)
                print(f"{key}: greedy {runs[key]['greedy']}", flush=True)
                write_json(args.output, {**header, "runs": runs})
    else:   # the runs' own command and machine, not this rebuild's
        header = {**header, **{k: previous[k] for k in ("command", "machine") if k in previous}}
    reports = {path.stem: json.loads(path.read_text()) for path in sorted(args.pipeline_dir.glob("*.json"))
               if path.stem == "experts" or path.stem.startswith("report")}
    pipeline = reports or previous.get("pipeline")
    result = {**header, "pipeline": pipeline,
              "reuse": summarise(runs, list(specs), args.seeds, args.steps, args.workdir, THRESHOLDS[args.env]),
              "runs": runs}
    write_json(args.output, result)
    print(json.dumps(result["reuse"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
