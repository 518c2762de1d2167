"""Teacher and student under action noise: how long do the LQR law and the primitives distilled from it walk?
(issue 13; docs/npmp.md, "Teacher and student under action noise").

The shipped primitives are distilled from a time-varying LQR law around the planner's run of each snippet
(agents/lqr.py, ``collect --expert-policy lqr``). A student is no more robust than its teacher, so this measures
both the same way: each controller walks each looped walk closed loop from its first frame with the tracking task's
ending switched off (``termination_threshold`` 1e9: drift from the reference's path does not end the episode, a
fall does), executing clip(command + N(0, sigma^2), -1, 1), and reports the steps before the head first drops
below the humanoid task's fall line (0.95 m; the snippet's length if it never does), for every noise level sigma
and seed, with how far the walker then is from its start (``travelled_m``: a walk, not a stagger on the spot) and
from the reference's root (``offset_m``: off the reference's path), and how far the walker and the reference turned
(``turn_degrees``, ``reference_turn_degrees``, counter-clockwise positive: on a curved walk, does it turn with the
arc?), also at every whole second it stayed upright (``turn_by_second_degrees``: a fall's spin left out, and
controllers that fall at different times compared over the same span). Noise-free runs are deterministic, so
sigma = 0 is run once.
- ``--law DATA``: the LQR law of each snippet, rebuilt from the planner's run stored in a data file collected with
  ``--expert-policy lqr`` (its ``plan`` arrays and the collection's LQR settings; nothing is planned again; a
  periodic law, ``periodic=true``, is searched again: 2-3 minutes a snippet);
- ``--primitives DIR ...``: primitives, the encoder reading the looped reference (``evaluate.primitives_actor``).

    python benchmarks/npmp_noise.py --mocap runs/npmp/loops/mocap.h5 --law runs/npmp/law2/two200.h5 \\
        --primitives data/primitives/npmp --snippets 08_02-0-loop10 07_01-0-loop10 --noise 0 0.03 0.1 --seeds 5

Results are kept per controller, snippet and noise level: a rerun measures only what the file lacks.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.npmp_long import Upright  # noqa: E402
from benchmarks.runs import fail, resumed_results, save_results  # noqa: E402

NO_TRACKING_END = {"termination_threshold": 1e9}


def upright_episode(env, act, noise: float, seed: int, observe=None) -> dict:
    """One episode of ``env`` (a tracking env, reset here to the clip's first frame) driven by
    ``act(t, proprio) -> command`` with action noise ``noise``: npmp_long's ``Upright`` summary (the steps before the
    head drops below the fall line, and how far the walker went from its start and from the reference's root).
    ``observe(env, steps)``, if given, is called after every step (e.g. ``benchmarks.runs.Strip``)."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=0)
    upright, steps = Upright(), 0
    hooks = [upright] + ([observe] if observe is not None else [])
    for hook in hooks:
        hook(env, steps)
    while upright.fell_at is None:
        command = act(steps, obs["proprio"])
        if noise:
            command = np.clip(command + noise * rng.standard_normal(command.shape), -1.0, 1.0)
        obs, _, terminated, truncated, _ = env.step(np.asarray(command, np.float32))
        steps += 1
        for hook in hooks:
            hook(env, steps)
        if terminated or truncated:
            break
    return upright.summary()


def law_expert(data: Path, snippet: str, mocap: Path):
    """(expert, env): the LQR law stored for ``snippet`` in ``data`` (``pipelines.npmp.data.FeedbackExpert``) and its
    tracking env with the tracking ending off."""
    from agents.lqr import LQRConfig
    from agents.mpc import MPCConfig
    from pipelines.npmp.data import FeedbackExpert, read_results, snippet_law

    results, meta = read_results(data)
    found = [r for r in results if r["snippet"] == snippet]
    if not found or "plan" not in found[0]:
        raise ValueError(f"{data} holds no LQR law for {snippet} (collect it with --expert-policy lqr)")
    planner = MPCConfig(**meta["planner"]) if meta.get("planner") else None   # the planner that made the run
    law = LQRConfig(**(snippet_law(found[0]["attrs"], meta) or {}))
    expert = FeedbackExpert(snippet, config=planner, lqr_config=law, plan=found[0]["plan"], mocap=str(mocap),
                            env_options=NO_TRACKING_END)
    return expert, expert.make_env(0)


def law_controller(data: Path, snippet: str, mocap: Path):
    """(env, act factory) of the LQR law stored for ``snippet`` in ``data``."""
    expert, env = law_expert(data, snippet, mocap)
    return env, lambda: (lambda t, state: expert.mean_command(None))


def primitives_controller(path: Path, snippet: str, mocap: Path):
    import envs
    from envs.mocap.tracking import TIMED_FAMILY
    from pipelines.npmp.evaluate import primitives_actor, reference_playback
    from priors.npmp import load_primitives

    model, _ = load_primitives(path)
    reference = reference_playback(snippet, 0, str(mocap))
    env = envs.make(f"{TIMED_FAMILY}:{snippet}", seed=0, clip_start=True, ref_path=str(mocap), **NO_TRACKING_END)
    return env, lambda: primitives_actor(model, snippet, 0, str(mocap), reference)   # one actor per episode


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mocap", type=Path, required=True, help="the mocap file with the looped walks (docs/mocap.md)")
    p.add_argument("--law", type=Path, help="a data file collected with --expert-policy lqr on these snippets")
    p.add_argument("--primitives", type=Path, nargs="*", default=[])
    p.add_argument("--snippets", nargs="+", required=True)
    p.add_argument("--noise", type=float, nargs="+", default=[0.0, 0.03, 0.1], help="action noise stds")
    p.add_argument("--seeds", type=int, default=5, help="noisy episodes per noise level")
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "npmp_noise.json")
    args = p.parse_args(argv)

    import torch

    from envs import EnvError
    from pipelines.npmp.data import ConfigError
    from priors.npmp import ModuleFileError

    torch.set_num_threads(1)
    if args.law is None and not args.primitives:
        fail("nothing to measure: give --law and/or --primitives")
    if any(not (s >= 0) for s in args.noise) or args.seeds < 1:
        fail("--noise must be >= 0 and --seeds >= 1")
    for path in ([args.law] if args.law else []) + [args.mocap]:
        if not path.is_file():
            fail(f"no such file: {path}")
    results = resumed_results(args.results, Path(__file__).name, argv, mocap=str(args.mocap))
    results.setdefault("controllers", {})
    controllers = ([(f"law:{args.law}", law_controller, args.law)] if args.law else []) + \
                  [(f"primitives:{path}", primitives_controller, path) for path in args.primitives]
    for name, build, source in controllers:
        entry = results["controllers"].setdefault(name, {})
        for snippet in args.snippets:
            rows = entry.setdefault(snippet, {})
            todo = [n for n in args.noise if f"{n:g}" not in rows]
            if not todo:
                continue
            try:
                env, make_actor = build(source, snippet, args.mocap)
            except (EnvError, ConfigError, ModuleFileError, ValueError, OSError) as e:
                fail(f"{name}: {snippet}: {str(e).splitlines()[0]}")
            try:
                for noise in todo:
                    episodes = [upright_episode(env, make_actor(), noise, seed)
                                for seed in range(args.seeds if noise else 1)]
                    steps = [e["steps"] for e in episodes]
                    rows[f"{noise:g}"] = {"upright_steps": steps, "median": statistics.median(steps),
                                          "of": env.last_step, "travelled_m": [e["travelled_m"] for e in episodes],
                                          "offset_m": [e["offset_m"] for e in episodes],
                                          "turn_degrees": [e["turn_degrees"] for e in episodes],
                                          "reference_turn_degrees": [e["reference_turn_degrees"] for e in episodes],
                                          **{key: [e[key] for e in episodes] for key in
                                             ("turn_by_second_degrees", "reference_turn_by_second_degrees")}}
                    save_results(args.results, results)   # after every noise level: a stopped run keeps what it has
                    print(f"{name}: {snippet}: noise {noise:g}: upright {steps} (median {statistics.median(steps):g})",
                          flush=True)
            finally:
                env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
