"""How much of the DAgger gap is the planner's own: its sampling noise, and its memory? (issue 13; docs/npmp.md,
"Walks longer than a clip").

``benchmarks/npmp_dagger_gap.py`` measures how far the primitives' actions are from the planner's labels along a
DAgger episode. A sampling planner's label is itself random: from the same state and the same warm start, another
draw of its candidates gives another command. This drives the primitives closed loop on each snippet (as
``python -m pipelines.npmp relabel --labeller planner`` does: action noise ``--noise``, the planner labelling every
visited state) and labels every state three times: with the planner's own stream of random numbers (the label a
DAgger round stores, whose plan warm-starts the next step), once more from the same warm start with another stream,
once from a forgotten plan (the warm start of an episode's first step) with a third stream, and once from the same
warm start with the walker moved onto the reference's root position (x, y) and heading -- a state the walker's
proprioception cannot tell apart from the real one. Per episode, over
the first ``--edge`` steps, the middle and the last ``--edge`` steps, per action dimension:
- ``label_variance``: half the squared difference of the first two labels, the variance of one label around the
  planner's mean command at that state and warm start -- the part of the gap no student can remove;
- ``forgotten_plan``: the squared difference between the stored label and the forgotten plan's. The warm start is
  the planner's memory of the steps before, which the state does not show a student; this minus twice
  ``label_variance`` is how far that memory moves the label;
- ``aligned``: the squared difference between the stored label and the aligned walker's. The primitives see
  proprioception and the clip's reference pose, never where the walker stands relative to the reference; this minus
  twice ``label_variance`` is how far that offset moves the label;
- ``gap``: the squared difference between the executed action and the stored label (what npmp_dagger_gap.py
  reports for a stored round);
- ``offset``: the walker's distance from the reference's root in the ground plane (m), and ``heading_error`` (rad),
  their root mean squares over the same steps.

    python benchmarks/planner_label_noise.py --primitives runs/npmp/walk62/p2_planned \\
        --mocap runs/npmp/loops/mocap.h5 --snippets 07_01-0-loop10 08_02-0-loop10
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import mujoco
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.npmp_dagger_gap import episode_gaps  # noqa: E402
from benchmarks.runs import fail, run_pool, write_json  # noqa: E402

PARTS = ("first", "middle", "last")
KEYS = ("label_variance", "forgotten_plan", "aligned", "gap")


class AlignedWalker:
    """Within the block, the walker's free joint is moved onto the reference's root position in the ground plane and
    turned to its heading (velocities turned with it); height, pose and everything proprioception reads stay."""

    def __init__(self, env):
        self.env = env

    def offset(self) -> tuple[float, float]:
        """The walker's distance from the reference's root in the ground plane (m) and its heading error (rad)."""
        distance, turn = self.env.reference_offset()
        return distance, abs(turn)

    def __enter__(self):
        data, reference, t = self.env.physics.data, self.env.clip_reference(), self.env.time_step
        self.saved = data.qpos[:7].copy(), data.qvel[:3].copy()
        turn = self.env.reference_offset()[1]
        c, s = np.cos(turn), np.sin(turn)
        data.qpos[:2] = reference["position"][t][:2]
        quaternion = np.empty(4)
        mujoco.mju_mulQuat(quaternion, np.array([np.cos(turn / 2), 0.0, 0.0, np.sin(turn / 2)]), data.qpos[3:7])
        data.qpos[3:7] = quaternion
        data.qvel[:2] = c * self.saved[1][0] - s * self.saved[1][1], s * self.saved[1][0] + c * self.saved[1][1]
        return self

    def __exit__(self, *exc):
        data = self.env.physics.data
        data.qpos[:7], data.qvel[:3] = self.saved
        return False


class FourLabels:
    """A planner expert (``pipelines.npmp.data.PlannerExpert``) for ``rollout``, whose label at each state is the
    planner's own; before it, the same state is labelled from the same warm start with the ``second`` stream of
    random numbers (``repeats``), from a forgotten plan with the ``third`` (``forgotten``), and from the same warm
    start with the walker aligned to the reference (``AlignedWalker``) with the ``fourth`` (``aligned``)."""

    def __init__(self, expert, env, seed: int):
        self.expert, self.repeats, self.forgotten, self.aligned, self.offsets = expert, [], [], [], []
        self.align = AlignedWalker(env)
        self.second, self.third, self.fourth = (np.random.default_rng(seed + offset)
                                                for offset in (1_000_003, 2_000_003, 3_000_003))

    def __getattr__(self, name):   # everything else is the expert's
        return getattr(self.expert, name)

    def mean_command(self, flat_obs: np.ndarray, reference_action: np.ndarray | None = None) -> np.ndarray:
        planner = self.expert.planner
        warm, own = planner.nominal.copy(), planner.rng
        self.offsets.append(self.align.offset())
        planner.rng = self.fourth
        with self.align:
            self.aligned.append(planner.act())
        planner.nominal = warm.copy()
        planner.rng = self.second
        self.repeats.append(planner.act())
        planner.nominal = warm.copy()
        planner.reset()
        planner.rng = self.third
        self.forgotten.append(planner.act())
        planner.rng, planner.nominal = own, warm
        return planner.act()   # last: its plan warm-starts the next step, as in relabel


def episode(args: tuple) -> tuple[str, dict]:
    """One primitives-driven episode of a snippet with every state labelled four times; runs in a worker process."""
    snippet, primitives, settings, mocap, noise_std, edge, seed = args
    from pipelines.npmp.data import planner_expert, rollout
    from pipelines.npmp.evaluate import primitives_actor
    from priors.npmp import load_primitives

    model, _ = load_primitives(primitives)
    expert = planner_expert(snippet, settings, mocap=mocap)
    env = expert.make_env(seed)
    labeller = FourLabels(expert, env, seed)
    try:
        result = rollout(labeller, env, noise_std, np.random.default_rng(seed),
                         actor=primitives_actor(model, snippet, ref_path=mocap))
    finally:
        expert.planner.close()
        env.close()
    labels, repeats, forgotten, aligned = (np.asarray(a, np.float64) for a in (
        result["mean_actions"], labeller.repeats, labeller.forgotten, labeller.aligned))
    offsets = np.asarray(labeller.offsets, np.float64)   # [T, 2]: distance, heading error
    twice = episode_gaps(labels, repeats, edge)

    def parts(gaps: dict) -> dict:
        return {part: gaps[part] for part in PARTS}

    def rms(values: np.ndarray) -> dict:
        return {part: float(np.sqrt(value)) for part, value in parts(episode_gaps(values, 0 * values, edge)).items()}

    return snippet, {"snippet": snippet, "steps": len(labels), "fell": result["terminated"],
                     "label_variance": {part: twice[part] / 2 for part in PARTS},
                     "forgotten_plan": parts(episode_gaps(labels, forgotten, edge)),
                     "aligned": parts(episode_gaps(labels, aligned, edge)),
                     "offset": rms(offsets[:, :1]), "heading_error": rms(offsets[:, 1:]),
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
            f"{key.replace('_', ' ')} " + " / ".join(f"{record[key][part]:.3f}" for part in PARTS)
            for key in KEYS + ("offset", "heading_error")), flush=True)

    jobs = [(s, args.primitives, settings, args.mocap, args.noise, args.edge, seed)
            for s in args.snippets for seed in range(args.episodes)]
    run_pool(episode, jobs, args.workers, None, on_result, "label noise")
    medians = {key: {part: float(np.nanmedian([e[key][part] for e in episodes])) for part in PARTS}
               for key in KEYS + ("offset", "heading_error")}
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
