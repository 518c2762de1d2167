"""How much of the DAgger gap is the planner's own: its sampling noise, and its memory? (issue 13; docs/npmp.md,
"Walks longer than a clip").

``benchmarks/npmp_dagger_gap.py`` measures how far the primitives' actions are from the planner's labels along a
DAgger episode. A sampling planner's label is itself random: from the same state and the same warm start, another
draw of its candidates gives another command. This drives the primitives closed loop on each snippet (as
``python -m pipelines.npmp relabel --labeller planner`` does: action noise ``--noise``, the planner labelling every
visited state) and labels every state three times: with the planner's own stream of random numbers (the label a
DAgger round stores, whose plan warm-starts the next step), once more from the same warm start with another stream,
and once from a forgotten plan (the warm start of an episode's first step) with a third stream. Per episode, over
the first ``--edge`` steps, the middle and the last ``--edge`` steps, per action dimension:
- ``label_variance``: half the squared difference of the first two labels, the variance of one label around the
  planner's mean command at that state and warm start -- the part of the gap no student can remove;
- ``forgotten_plan``: the squared difference between the stored label and the forgotten plan's. The warm start is
  the planner's memory of the steps before, which the state does not show a student; this minus twice
  ``label_variance`` is how far that memory moves the label;
- ``gap``: the squared difference between the executed action and the stored label (what npmp_dagger_gap.py
  reports for a stored round).

    python benchmarks/planner_label_noise.py --primitives runs/npmp/walk62/p2_planned \\
        --mocap runs/npmp/loops/mocap.h5 --snippets 07_01-0-loop10 08_02-0-loop10
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.npmp_dagger_gap import episode_gaps  # noqa: E402
from benchmarks.runs import fail, run_pool, write_json  # noqa: E402

PARTS = ("first", "middle", "last")
KEYS = ("label_variance", "forgotten_plan", "gap")


class ThreeLabels:
    """A planner expert (``pipelines.npmp.data.PlannerExpert``) for ``rollout``, whose label at each state is the
    planner's own; before it, the same state is labelled from the same warm start with the ``second`` stream of
    random numbers (``repeats``) and from a forgotten plan with the ``third`` (``forgotten``)."""

    def __init__(self, expert, seed: int):
        self.expert, self.repeats, self.forgotten = expert, [], []
        self.second, self.third = (np.random.default_rng(seed + offset) for offset in (1_000_003, 2_000_003))

    def __getattr__(self, name):   # everything else is the expert's
        return getattr(self.expert, name)

    def mean_command(self, flat_obs: np.ndarray, reference_action: np.ndarray | None = None) -> np.ndarray:
        planner = self.expert.planner
        warm, own = planner.nominal.copy(), planner.rng
        planner.rng = self.second
        self.repeats.append(planner.act())
        planner.reset()
        planner.rng = self.third
        self.forgotten.append(planner.act())
        planner.rng, planner.nominal = own, warm
        return planner.act()   # last: its plan warm-starts the next step, as in relabel


def episode(args: tuple) -> tuple[str, dict]:
    """One primitives-driven episode of a snippet with every state labelled three times; runs in a worker process."""
    snippet, primitives, settings, mocap, noise_std, edge, seed = args
    from pipelines.npmp.data import planner_expert, rollout
    from pipelines.npmp.evaluate import primitives_actor
    from priors.npmp import load_primitives

    model, _ = load_primitives(primitives)
    expert = planner_expert(snippet, settings, mocap=mocap)
    env = expert.make_env(seed)
    labeller = ThreeLabels(expert, seed)
    try:
        result = rollout(labeller, env, noise_std, np.random.default_rng(seed),
                         actor=primitives_actor(model, snippet, ref_path=mocap))
    finally:
        expert.planner.close()
        env.close()
    labels, repeats, forgotten = (np.asarray(a, np.float64) for a in (result["mean_actions"], labeller.repeats,
                                                                       labeller.forgotten))
    twice = episode_gaps(labels, repeats, edge)

    def parts(gaps: dict) -> dict:
        return {part: gaps[part] for part in PARTS}

    return snippet, {"snippet": snippet, "steps": len(labels), "fell": result["terminated"],
                     "label_variance": {part: twice[part] / 2 for part in PARTS},
                     "forgotten_plan": parts(episode_gaps(labels, forgotten, edge)),
                     "gap": parts(episode_gaps(result["actions"], labels, edge))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--primitives", required=True, help="the primitives that drive (a distill run directory)")
    p.add_argument("--snippets", nargs="+", required=True)
    p.add_argument("--mocap", help="the mocap file holding the snippets (default: the shipped one)")
    p.add_argument("--episodes", type=int, default=1, help="episodes per snippet")
    p.add_argument("--noise", type=float, default=0.05, help="action noise std, as in relabel")
    p.add_argument("--edge", type=int, default=20, help="steps at each end of an episode")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="planner setting (MPCConfig)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--results", type=Path, help="also write the numbers here (JSON)")
    args = p.parse_args(argv)

    from agents.config import ConfigError, apply_overrides
    from agents.mpc import MPCConfig
    from envs import EnvError
    from envs.mocap.tracking import DEFAULT_OUTPUT, snippet_ids
    from priors.io import ModuleFileError
    from priors.npmp import load_primitives

    for name, value, least in (("--episodes", args.episodes, 1), ("--edge", args.edge, 1),
                               ("--workers", args.workers, 1)):
        if value < least:
            fail(f"{name} must be >= {least}, got {value}")
    if not args.noise >= 0:
        fail(f"--noise must be >= 0, got {args.noise}")
    try:
        model, _ = load_primitives(args.primitives)
    except ModuleFileError as e:
        fail(str(e))
    if model.config.lookahead_source != "reference":
        fail(f"{args.primitives}: only primitives whose look-ahead reads the reference track a clip closed loop")
    try:
        settings = dataclasses.asdict(apply_overrides(MPCConfig(threads=1),
                                                      dict(pair.split("=", 1) for pair in args.set)))
        available = snippet_ids(args.mocap or str(DEFAULT_OUTPUT), augmented=True)
    except (ValueError, EnvError) as e:   # ConfigError, a --set without "=", a missing or foreign mocap file
        fail(str(e) if isinstance(e, (ConfigError, EnvError)) else f"--set: {e}")
    unknown = [s for s in args.snippets if s not in available]
    if unknown:
        fail(f"unknown snippet(s) {', '.join(unknown)}")

    episodes = []

    def on_result(item):
        snippet, record = item
        episodes.append(record)
        print(f"{snippet}: {record['steps']} steps; " + "; ".join(
            f"{key.replace('_', ' ')} " + " / ".join(f"{record[key][part]:.3f}" for part in PARTS) for key in KEYS),
            flush=True)

    jobs = [(s, args.primitives, settings, args.mocap, args.noise, args.edge, seed)
            for s in args.snippets for seed in range(args.episodes)]
    run_pool(episode, jobs, args.workers, None, on_result, "label noise")
    medians = {key: {part: float(np.nanmedian([e[key][part] for e in episodes])) for part in PARTS} for key in KEYS}
    print(f"median over {len(episodes)} episodes of {statistics.median(e['steps'] for e in episodes):.0f} steps "
          f"(first / middle / last {args.edge} steps, per action dimension): " + "; ".join(
              f"{key.replace('_', ' ')} " + " / ".join(f"{medians[key][part]:.3f}" for part in PARTS) for key in KEYS))
    if args.results:
        write_json(args.results, {"command": "python " + " ".join(["benchmarks/planner_label_noise.py",
                                                                   *(argv if argv is not None else sys.argv[1:])]),
                                  "planner": settings, "noise_std": args.noise, "edge": args.edge,
                                  "medians": medians, "episodes": episodes})
    return 0


if __name__ == "__main__":
    sys.exit(main())
