"""Clip-tracking experts (seed 000 §8.1): one SVG(0) policy per motion-capture snippet, trained in parallel on Ray.

§8.1 trains one time-indexed tracking policy per clip snippet; the NPMP is then distilled from their rollouts
(§8.2-8.3). Here an expert is an ordinary ``train.py`` run of ``svg0`` on ``humanoid-track-residual:<snippet>``
(default; or ``humanoid-track-time:<snippet>`` with ``family``; envs/mocap/tracking.py: the CoMic reward, the time
in the clip as the task observation, random start along the snippet, early termination) in
``<root>/<snippet>/`` -- ``config.json``, ``checkpoints/``, TensorBoard events -- with its console output in
``<root>/<snippet>.log``. The residual task is a departure from the seed (its experts learn the whole action over
~10^9 steps; here the policy corrects a feed-forward reference controller; envs/mocap/tracking.py, docs/npmp.md).
The seed leaves the expert learner's settings open; we use the repo's svg0 defaults (agents/svg0.py, any of them
changeable with ``overrides`` / ``--set``) with ``update_every=4`` (``EXPERT_OVERRIDES``) and evaluations and checkpoints every 4 000 env steps.

- experts, reports and data collection fan out over snippets with ``cluster.fanout.on_ray``.
- ``train_experts(snippets, root, steps, ...)``: resumable. A new snippet starts a run; an existing run directory
  continues from its newest checkpoint exactly as ``train.py --resume DIR --steps N`` does (``agents.loop.build_run`` +
  ``agents.loop.Trainer``); a run already at ``steps`` or beyond is skipped; a directory whose first checkpoint was
  never written starts again from step 0 with its saved config. ``--set`` values must agree with an existing
  run's saved config (a resumed run cannot change its settings).
- ``expert_report(root, ...)``: each expert's deterministic (mean-action) return from the snippet's first frame,
  relative to the reference's return, and its mean time before termination. The start state (the snippet's first
  frame), the physics and the mean action are deterministic, so the episodes of one expert repeat exactly
  (``return_std`` 0 in practice); ``episodes`` > 1 guards against any nondeterminism rather than averaging noise.

Reference return: kinematic playback of the snippet (``ReferencePlayback``) scores ``MAX_COMIC_REWARD`` on every
step, so the reference return of a whole snippet is ``MAX_COMIC_REWARD * full_steps``, where ``full_steps`` (the
length of an episode that is never terminated: dm_control ends it ``max(ref_steps) + 1`` frames before the
snippet's last frame) is measured by playing the reference once; the report carries both numbers.

Scale: each task trains one snippet with one torch thread on one CPU (``cpus_per_task=1``); the CMU humanoid runs at
about 40 env steps/s while svg0 learns (17-41 measured here with the cores shared; fewer updates, e.g.
``update_every=4``, run faster), so 1M steps is roughly 7 h per snippet and the pipeline is bounded by
cores: ``--num-cpus`` (local) or a cluster ``--address`` sets how many snippets train at once. On a real cluster
every node needs this repository installed (``pip install -e .``) and ``root`` on a shared filesystem; a killed
task loses at most ``checkpoint_every`` steps and resumes on the next call. Two trainers must never share a run
directory (nothing locks it).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import json
import sys
from pathlib import Path

import numpy as np

from cluster import one_line
from cluster.fanout import FanOutError, on_ray
from envs.mocap.tracking import RESIDUAL_FAMILY, TIMED_FAMILY

# the expert's task: tracking by a correction to a feed-forward reference controller (default; docs/npmp.md), or
# plain time-indexed tracking as in the seed (envs/mocap/tracking.py)
EXPERT_FAMILIES = (RESIDUAL_FAMILY, TIMED_FAMILY)
AGENT = "svg0"
# run settings of a new expert; --set eval_every=... / checkpoint_every=... change them
RUN_FLAGS = {"eval_every": 4000, "checkpoint_every": 4000}
# svg0 settings of the experts (on top of svg0's defaults): half the updates per step of the default, which makes
# an expert ~1.5x faster on a CPU core; --set changes them (and any other svg0 field)
EXPERT_OVERRIDES = {"update_every": "4"}


# -- training -----------------------------------------------------------------------------------------------------
def check_snippets(snippets, ref_path=None) -> list[str]:
    """The snippet ids (of the shipped mocap file, or ``ref_path``), or one EnvError naming the unknown ones (with
    close matches)."""
    from envs import EnvError
    from envs.mocap.tracking import DEFAULT_OUTPUT, snippet_ids

    available = snippet_ids(ref_path or DEFAULT_OUTPUT, augmented=True)
    snippets = list(snippets)
    if not snippets:
        raise EnvError("no snippets given")
    unknown = [s for s in snippets if s not in available]
    if unknown:
        hints = [f"{s} (did you mean {', '.join(difflib.get_close_matches(s, available, n=2))}?)"
                 if difflib.get_close_matches(s, available, n=1) else s for s in unknown]
        raise EnvError(f"unknown snippet(s) {', '.join(hints)}; {len(available)} snippets: "
                       f"{', '.join(available[:5])}, ... (`python train.py --list`)")
    repeated = sorted({s for s in snippets if snippets.count(s) > 1})
    if repeated:   # two trainers in one run directory would corrupt it
        raise EnvError(f"snippet(s) {', '.join(repeated)} given more than once")
    return snippets


def checkpoint_steps(run_dir: Path) -> int | None:
    """Env steps of a run's newest checkpoint, None if it has none (counters in state.json; no tensors read)."""
    from agents import checkpoint

    try:
        path = checkpoint.latest(Path(run_dir) / "checkpoints")
        return int(json.loads((path / "state.json").read_text())["counters"]["env_steps"])
    except checkpoint.CheckpointError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise checkpoint.CheckpointError(f"{run_dir}: newest checkpoint is unreadable ({one_line(e)})") from None


def _check_same_settings(run_dir: Path, family: str, seed: int, overrides: dict[str, str]) -> None:
    """A resumed run keeps its saved config: ``seed`` and ``--set`` values must agree with it."""
    from agents.config import ConfigError, apply_overrides
    from agents.loop import RunConfig, load_run_config
    from agents.schedule import split_schedule

    run, agent_config = load_run_config(run_dir)
    expected_env = f"{family}:{run_dir.name}"
    if run.env != expected_env or run.agent != AGENT:
        raise ConfigError(f"{run_dir} holds a {run.agent} run on {run.env}, not an expert ({AGENT} on {expected_env})")
    run_fields = {f.name for f in dataclasses.fields(RunConfig)}
    scheduled, rest = split_schedule(overrides)
    wanted_run = apply_overrides(dataclasses.replace(run, seed=seed), {k: v for k, v in rest.items() if k in run_fields})
    wanted_run = dataclasses.replace(wanted_run, schedule=apply_overrides(run.schedule, scheduled))
    wanted_agent = apply_overrides(agent_config, {k: v for k, v in rest.items() if k not in run_fields})
    differ = [f"{k}={getattr(wanted_run, k)!r} (saved {getattr(run, k)!r})" for k in [*run_fields - {"steps"}]
              if getattr(wanted_run, k) != getattr(run, k)]
    differ += [f"{f.name}={getattr(wanted_agent, f.name)!r} (saved {getattr(agent_config, f.name)!r})"
               for f in dataclasses.fields(agent_config) if getattr(wanted_agent, f.name) != getattr(agent_config, f.name)]
    if differ:
        raise ConfigError(f"{run_dir} was trained with other settings: {', '.join(sorted(differ))}; a resumed run "
                          "keeps its config (drop those settings or use another root)")


def train_expert(snippet: str, root: str | Path, steps: int, seed: int = 0,
                 overrides: dict[str, str] | None = None, family: str = RESIDUAL_FAMILY) -> dict:
    """Train, continue or skip the expert for one snippet in ``<root>/<snippet>`` (one Ray task; also callable
    directly). Returns {snippet, run_dir, status: new|resumed|restarted|skipped, env_steps, eval_return}."""
    import torch

    from agents.loop import Trainer, build_run, load_run_config

    torch.set_num_threads(1)
    overrides = dict(overrides or {})
    run_dir = Path(root).resolve() / snippet
    if (run_dir / "config.json").exists():
        _check_same_settings(run_dir, family, seed, overrides)
        done = checkpoint_steps(run_dir)
        if done is not None and done >= steps:
            return {"snippet": snippet, "run_dir": str(run_dir), "status": "skipped", "env_steps": done,
                    "eval_return": None}
        if done is None:   # killed before its first checkpoint: nothing to resume, start over with its config
            run, agent_config = load_run_config(run_dir)
            run, resume_from, status = dataclasses.replace(run, steps=steps, logdir=str(run_dir)), None, "restarted"
        else:
            run, agent_config, resume_from = build_run({"steps": steps}, {}, resume=run_dir)
            status = "resumed"
    else:
        flags = {"env": f"{family}:{snippet}", "agent": AGENT, "steps": steps, "seed": seed, **RUN_FLAGS}
        run, agent_config, resume_from = build_run(flags, overrides, logdir=str(run_dir))
        status = "new"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(run_dir.parent / f"{snippet}.log", "a") as log, \
            contextlib.redirect_stderr(log), contextlib.redirect_stdout(log):
        result = Trainer(run, agent_config, resume_from).train()
    return {"snippet": snippet, "run_dir": str(run_dir), "status": status, "env_steps": result["env_steps"],
            "eval_return": result["eval_return"]}


@dataclasses.dataclass(frozen=True)
class _ExpertJob:
    """One snippet's training job (a picklable Ray item)."""
    snippet: str
    root: str
    steps: int
    seed: int
    overrides: dict
    family: str

    def __str__(self) -> str:
        return self.snippet


def _train_job(job: _ExpertJob) -> dict:
    return train_expert(job.snippet, job.root, job.steps, job.seed, job.overrides, job.family)


def train_experts(snippets, root: str | Path, steps: int, address: str | None = None, num_cpus: int | None = None,
                  seed: int = 0, overrides: dict[str, str] | list[str] | None = None,
                  family: str = RESIDUAL_FAMILY) -> list[dict]:
    """One svg0 expert per snippet in ``<root>/<snippet>`` on ``<family>:<snippet>``, trained ``steps`` env steps,
    one Ray task (1 CPU, 1 thread) per snippet; returns ``train_expert``'s dicts in snippet order. ``overrides``:
    ``{"key": "value"}`` or ``["key=value", ...]`` (train.py's ``--set``) for new runs; existing runs must agree
    with them (and with ``seed`` and ``family``).
    Raises EnvError (unknown snippets) or ConfigError before any task starts, FanOutError if a task fails."""
    from agents.config import ConfigError, split_overrides

    snippets = check_snippets(snippets)
    if steps < 1:
        raise ConfigError(f"steps must be positive, got {steps}")
    if family not in EXPERT_FAMILIES:
        raise ConfigError(f"family must be one of {', '.join(EXPERT_FAMILIES)}, got {family!r}")
    if isinstance(overrides, (list, tuple)):
        overrides = split_overrides(list(overrides))
    root = Path(root).resolve()
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{root} is not a directory")
    jobs = [_ExpertJob(s, str(root), steps, seed, {**EXPERT_OVERRIDES, **(overrides or {})}, family)
            for s in snippets]
    return on_ray(_train_job, jobs, address=address, num_cpus=num_cpus, cpus_per_task=1)


# -- evaluation ---------------------------------------------------------------------------------------------------
def reference_score(snippet: str, ref_path=None) -> dict:
    """The reference's own score on ``snippet`` from its first frame: kinematic playback (every step at the
    reference). {snippet, full_steps, playback_return, reference_return = MAX_COMIC_REWARD * full_steps}."""
    import envs
    from envs.mocap.tracking import DEFAULT_OUTPUT, MAX_COMIC_REWARD, TrackingEnv

    check_snippets([snippet], ref_path)
    env = TrackingEnv([snippet], ref_path=ref_path or DEFAULT_OUTPUT, playback=True, reference="time",
                      clip_start=True, seed=0)
    env.reset(seed=0)
    total, steps, done = 0.0, 0, False
    zero = np.zeros(env.action_space.shape, np.float32)
    while not done:
        _, reward, terminated, truncated, _ = env.step(zero)
        total, steps, done = total + reward, steps + 1, terminated or truncated
    env.close()
    if terminated:
        raise envs.EnvError(f"{snippet}: kinematic playback terminated at step {steps}; the snippet's data is broken")
    return {"snippet": snippet, "full_steps": steps, "playback_return": total,
            "reference_return": MAX_COMIC_REWARD * steps}


def evaluate_expert(run_dir: str | Path, episodes: int = 5, seed: int = 0) -> dict:
    """The expert in ``run_dir`` (newest checkpoint, ``pipelines.npmp.data.Expert``) acting deterministically -- its
    mean action, as in §8.1-8.2 (``data.rollout`` without noise; a residual expert's command includes the
    reference controller's) -- from the snippet's first frame for ``episodes`` episodes (env reset seeds drawn from
    ``seed``), against the reference (``reference_score``)."""
    import torch

    from agents.config import ConfigError
    from pipelines.npmp.data import Expert, rollout

    if episodes < 1:
        raise ConfigError(f"episodes must be positive, got {episodes}")
    torch.set_num_threads(1)
    expert = Expert(run_dir)
    reference = reference_score(expert.snippet)
    env = expert.make_env(seed=0)
    seconds_per_step = env._env.control_timestep() * expert.action_repeat   # the dm_env's control step (data dt)
    rng = np.random.default_rng(seed)
    episodes_run = [rollout(expert, env, 0.0, rng) for _ in range(episodes)]   # sigma 0: the mean action
    env.close()
    returns = [float(np.sum(e["rewards"], dtype=np.float64)) for e in episodes_run]
    lengths = [len(e["rewards"]) for e in episodes_run]
    terminations = [e["terminated"] for e in episodes_run]
    mean_return = float(np.mean(returns))
    baseline = {}
    if expert.residual_scale is not None:   # what the feed-forward reference controller alone scores (no correction)
        env = expert.make_env(seed=0)
        env.reset(seed=seed)
        total, steps, done = 0.0, 0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(np.zeros(expert.action_dim, np.float32))
            total, steps, done = total + reward, steps + 1, terminated or truncated
        env.close()
        baseline = {"feed_forward_return": total, "feed_forward_steps": steps}
    return {**baseline, "snippet": expert.snippet, "run_dir": str(run_dir), "env_steps": expert.steps, "episodes": episodes,
            "return": mean_return, "return_std": float(np.std(returns)),
            "reference_return": reference["reference_return"], "playback_return": reference["playback_return"],
            "relative_return": mean_return / reference["reference_return"],
            "full_steps": reference["full_steps"], "mean_steps": float(np.mean(lengths)),
            "mean_seconds": float(np.mean(lengths)) * seconds_per_step,
            "termination_fraction": float(np.mean(terminations))}


def expert_dirs(root: str | Path, snippets=None) -> list[Path]:
    """Run directories of the experts under ``root`` that have a checkpoint (all, or those of ``snippets``)."""
    from agents.config import ConfigError

    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"no experts directory {root}")
    found = {p.name: p for p in sorted(root.iterdir())
             if (p / "config.json").is_file() and checkpoint_steps(p) is not None}
    if snippets is None:
        if not found:
            raise ConfigError(f"no expert with a checkpoint under {root}")
        return list(found.values())
    missing = [s for s in snippets if s not in found]
    if missing:
        raise ConfigError(f"no expert with a checkpoint for {', '.join(missing)} under {root}")
    return [found[s] for s in snippets]


def expert_report(root: str | Path, snippets=None, episodes: int = 5, use_ray: bool = False,
                  address: str | None = None, num_cpus: int | None = None) -> list[dict]:
    """``evaluate_expert`` for every expert under ``root`` (or those of ``snippets``), in directory order; in this
    process, or one Ray task per expert with ``use_ray`` (or an ``address``)."""
    dirs = expert_dirs(root, snippets)
    if use_ray or address:
        return on_ray(_evaluate_job, [(str(d), episodes) for d in dirs], address=address, num_cpus=num_cpus,
                      label=lambda job: Path(job[0]).name)
    return [evaluate_expert(d, episodes) for d in dirs]


def _evaluate_job(job: tuple[str, int]) -> dict:
    return evaluate_expert(*job)


# -- command line (mounted by pipelines/npmp/__main__.py) -------------------------------------------------------------
def add_experts_parser(subparsers, default_snippets=None) -> None:
    """``experts`` (train/resume) and ``report-experts`` subcommands; ``run_experts(args)`` runs either.
    ``default_snippets``: what ``experts`` trains without ``--snippets`` / ``--all`` (None: one of them is needed)."""
    p = subparsers.add_parser("experts", help="train or continue one svg0 tracking expert per snippet on Ray")
    p.add_argument("--snippets", nargs="+", metavar="ID", default=list(default_snippets or []) or None,
                   help="snippet ids, e.g. 07_01-0 09_01-0" + (f" (default: {' '.join(default_snippets)})"
                                                              if default_snippets else ""))
    p.add_argument("--all", action="store_true", help="every snippet in data/mocap")
    p.add_argument("--steps", type=int, required=True, help="env steps per expert (existing runs continue to it)")
    p.add_argument("--root", default="runs/experts", help="one run directory per snippet (default runs/experts)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--family", choices=EXPERT_FAMILIES, default=RESIDUAL_FAMILY,
                   help="the experts' tracking task (default: residual to a feed-forward reference controller)")
    p.add_argument("--address", help="Ray cluster to join: auto or ray://host:port (default: a local cluster)")
    p.add_argument("--num-cpus", type=int, help="CPUs of the local cluster (default: all); one expert per CPU")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="svg0 or run setting for new experts, e.g. --set hidden=256,256 (repeatable)")
    p.set_defaults(experts_action="train")
    r = subparsers.add_parser("report-experts", help="each expert's return relative to the reference and its "
                                                     "mean time before termination")
    r.add_argument("--root", default="runs/experts")
    r.add_argument("--snippets", nargs="+", metavar="ID", help="only these experts (default: all under --root)")
    r.add_argument("--episodes", type=int, default=5)
    r.add_argument("--out", help="also write the report as JSON to this file")
    r.add_argument("--ray", action="store_true", help="one Ray task per expert (implied by --address)")
    r.add_argument("--address")
    r.add_argument("--num-cpus", type=int)
    r.set_defaults(experts_action="report")


def _errors():
    from agents.checkpoint import CheckpointError
    from agents.config import ConfigError
    from envs import EnvError

    return ConfigError, EnvError, CheckpointError, FanOutError


def run_experts(args: argparse.Namespace) -> int:
    """Run the ``experts`` or ``report-experts`` subcommand parsed by ``add_experts_parser``; the exit status."""
    if args.experts_action == "report":
        return _run_report(args)
    try:
        from envs.mocap.tracking import snippet_ids

        if not args.all and not args.snippets:
            from agents.config import ConfigError

            raise ConfigError("give --snippets ID ... or --all")
        snippets = snippet_ids() if args.all else args.snippets
        results = train_experts(snippets, args.root, args.steps, address=args.address, num_cpus=args.num_cpus,
                                seed=args.seed, overrides=args.overrides, family=args.family)
    except _errors() as e:
        print(f"error: {e}", file=sys.stderr)
        return 2 if not isinstance(e, FanOutError) else 1
    for r in results:
        evaluation = "" if r["eval_return"] is None else f", eval return {r['eval_return']:.1f}"
        print(f"{r['snippet']}: {r['status']}, {r['env_steps']} env steps{evaluation} ({r['run_dir']})")
    return 0


def format_report(rows: list[dict]) -> str:
    lines = [f"{'snippet':<16}{'env steps':>10}{'return':>9}{'reference':>10}{'relative':>9}"
             f"{'steps':>8}{'of':>5}{'seconds':>9}{'terminated':>11}{'feed-forward':>14}"]
    for r in rows:
        lines.append(f"{r['snippet']:<16}{r['env_steps']:>10}{r['return']:>9.1f}{r['reference_return']:>10.1f}"
                     f"{r['relative_return']:>9.2f}{r['mean_steps']:>8.1f}{r['full_steps']:>5}"
                     f"{r['mean_seconds']:>9.2f}{r['termination_fraction']:>11.2f}"
                     f"{r.get('feed_forward_return', float('nan')):>14.1f}")
    if rows:
        lines.append(f"{len(rows)} experts; mean relative return "
                     f"{np.mean([r['relative_return'] for r in rows]):.3f}")
    return "\n".join(lines)


def _run_report(args: argparse.Namespace) -> int:
    try:
        rows = expert_report(args.root, args.snippets, args.episodes, use_ray=args.ray, address=args.address,
                             num_cpus=args.num_cpus)
    except _errors() as e:
        print(f"error: {e}", file=sys.stderr)
        return 2 if not isinstance(e, FanOutError) else 1
    print(format_report(rows))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0
