"""Where do teacher and student turn away from the reference's heading? (issue 13; docs/npmp.md, "The teachers
spin at the joins").

The clip primitives fall where their chains join one turn to the other. This measures, per snippet of a mocap file
(chains written by ``pipelines.npmp chain``), how far the walker's heading (the root's x axis in the ground plane)
departs from the reference's, frame by frame:
- ``--plans DATA ...``: the planner's own runs stored in LQR collections (``collect --expert-policy lqr``; their
  ``plan`` arrays, nothing is planned again), the nominal that the law, and through it the student, follows;
- ``--law DATA``: the LQR law rebuilt from such a run, closed loop and noise-free (``npmp_noise.law_controller``);
- ``--primitives DIR ...``: primitives closed loop and noise-free, the encoder reading the snippet.
For each: the frames it lasts (a plan's run ends where the planner fell; a closed-loop one at the fall line), the
largest heading error and its frame, and the error every ``--every`` frames (degrees, counter-clockwise positive:
the walker turned left of the reference). A walker that keeps its root within 0.3 m of the reference while its
heading swings 100 degrees away and back is spinning, not tracking. For a plan also how far its root (the pelvis)
sinks below the reference's: a run can reach its chain's end with the head above the fall line (0.95 m) yet crouched,
which its law, and a student, then learn (docs/npmp.md, "A teacher that crouched"). And how well it keeps the
reference's pace: its root's ground speed against the reference's, over the whole run and over its last
``PACE_TAIL`` frames, and how far its root lies from the reference's at its last frame (a run whose joints keep the
clip's rhythm while its body covers half the ground shuffles, and its law and students learn that), and the first
frame where its CoMic tracking error passes the termination threshold: the planner's score zeroes the reward of a
rollout from there, so from that frame on (unless ``MPCConfig.follow_walker``) it plans blind (docs/npmp.md,
"Teachers that lose the pace").

    python benchmarks/npmp_heading.py --mocap runs/same2/chains.h5 --plans runs/branch/b1.h5 runs/branch/b2.h5 \\
        --law runs/branch/b1.h5 --primitives data/primitives/npmp-clips --snippets pairE pairF pairH \\
        --results benchmarks/results/npmp_heading.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.npmp_long import Upright  # noqa: E402
from benchmarks.npmp_noise import law_controller, primitives_controller, upright_episode  # noqa: E402
from benchmarks.runs import fail, resumed_results, save_results  # noqa: E402


def heading_errors(headings: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Degrees the walker's headings lie counter-clockwise of the reference's, each wrapped to [-180, 180)."""
    return np.degrees(np.remainder(np.asarray(headings) - np.asarray(reference) + np.pi, 2 * np.pi) - np.pi)


def summary(errors: np.ndarray, frames: int, of: int, every: int) -> dict:
    worst = int(np.argmax(np.abs(errors)))
    return {"frames": frames, "of": of, "max_abs_degrees": round(float(abs(errors[worst])), 1),
            "at_frame": worst, "every": every, "degrees": np.round(errors[::every], 1).tolist()}


def plan_states(data: Path, snippet: str) -> np.ndarray:
    """The physics states (mjSTATE_FULLPHYSICS: time, then qpos: root xyz, quat, ...) of the planner's run of
    ``snippet`` stored in ``data`` (ValueError if it has none)."""
    from pipelines.npmp.data import read_results

    results, _ = read_results(data)
    found = [r for r in results if r["snippet"] == snippet and "plan" in r]
    if not found:
        raise ValueError(f"{data} holds no planner run of {snippet} (collect it with --expert-policy lqr)")
    return np.asarray(found[0]["plan"]["physics_states"])


def plan_headings(states: np.ndarray) -> np.ndarray:
    """The root headings of a planner's run (``plan_states``)."""
    from envs.mocap.tracking import heading

    return np.array([heading(q) for q in states[:, 4:8]])


def reference_root_heights(snippet: str, mocap: Path) -> np.ndarray:
    import h5py

    with h5py.File(mocap, "r") as f:
        return np.asarray(f[snippet]["walkers/walker_0/position"][2], np.float64)


def sinking(heights: np.ndarray, reference: np.ndarray, deep: float = 0.3) -> dict:
    """How far ``heights`` fall below ``reference`` (m, frame by frame): the most and its frame, and the frames
    more than ``deep`` below."""
    n = min(len(heights), len(reference))
    below = reference[:n] - heights[:n]
    worst = int(np.argmax(below))
    return {"root_below_reference_max_m": round(float(below[worst]), 3), "root_below_at_frame": worst,
            f"frames_root_below_{deep:g}m": int((below > deep).sum())}


PACE_TAIL = 60   # frames: as far as the clip primitives read the reference ahead


def reference_root_positions(snippet: str, mocap: Path) -> np.ndarray:
    import h5py

    with h5py.File(mocap, "r") as f:
        return np.asarray(f[snippet]["walkers/walker_0/position"], np.float64).T


def pace(positions: np.ndarray, reference: np.ndarray, tail: int = PACE_TAIL) -> dict:
    """How a run's root positions [N, >= 2] keep up with the reference's [M, >= 2] (frame by frame, the same
    start): its mean ground speed over the reference's, over all frames both have and over the last ``tail`` of
    them, and the ground distance between the two roots at the last such frame (m)."""
    n = min(len(positions), len(reference))
    if n < 2:
        raise ValueError(f"need two frames or more to measure a pace, got {n}")
    ground = np.asarray(positions[:n, :2], np.float64), np.asarray(reference[:n, :2], np.float64)
    walked, shown = (np.linalg.norm(np.diff(xy, axis=0), axis=1) for xy in ground)
    last = slice(max(0, n - 1 - tail), n - 1)
    return {"speed_ratio": round(float(walked.sum() / max(shown.sum(), 1e-9)), 3),
            f"speed_ratio_last_{tail}": round(float(walked[last].sum() / max(shown[last].sum(), 1e-9)), 3),
            "root_off_reference_at_end_m": round(float(np.linalg.norm(ground[0][-1] - ground[1][-1])), 3)}


def tracking_errors(states: np.ndarray, snippet: str, mocap: Path) -> np.ndarray:
    """The CoMic termination error (``agents.mpc.comic_terms``) of each state of a planner's run against the
    reference frame it was planned for."""
    from agents.mpc import REFERENCE_KEYS, WalkerFeatures, comic_terms
    from envs.mocap.tracking import TrackingEnv

    env = TrackingEnv([snippet], ref_path=str(mocap), clip_start=True, ending="fall")
    try:
        env.reset(seed=0)
        reference, nq, nv = env.clip_reference(), env.physics.model.nq, env.physics.model.nv
        n = min(len(states), len(reference["joints"]))
        features = WalkerFeatures(env.physics, env.walker)(states[:n, 1:1 + nq], states[:n, 1 + nq:1 + nq + nv])
        return comic_terms(features, {k: reference[k][:n] for k in REFERENCE_KEYS})[1]
    finally:
        env.close()


def blind_from(errors: np.ndarray) -> dict:
    """The first frame whose tracking error passes the termination threshold, and how many do."""
    from envs.mocap.tracking import TERMINATION_ERROR_THRESHOLD

    over = np.nonzero(errors > TERMINATION_ERROR_THRESHOLD)[0]
    return {"first_frame_over_termination_error": int(over[0]) if len(over) else None,
            "frames_over_termination_error": int(len(over))}


def reference_headings(snippet: str, mocap: Path) -> np.ndarray:
    from envs.mocap.tracking import reference_playback

    return np.asarray(reference_playback(snippet, 0, str(mocap)).root[:, 2], np.float64)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mocap", type=Path, required=True, help="the mocap file holding the snippets (chains)")
    p.add_argument("--snippets", nargs="+", required=True)
    p.add_argument("--plans", type=Path, nargs="*", default=[],
                   help="LQR collections: the planner's runs (the first file holding a snippet's run is used)")
    p.add_argument("--law", type=Path, help="an LQR collection: its laws closed loop")
    p.add_argument("--primitives", type=Path, nargs="*", default=[])
    p.add_argument("--every", type=int, default=5, help="frames between the errors reported")
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "npmp_heading.json")
    args = p.parse_args(argv)

    import torch

    from envs import EnvError
    from pipelines.npmp.data import ConfigError
    from priors.npmp import ModuleFileError

    torch.set_num_threads(1)
    if not (args.plans or args.law or args.primitives) or args.every < 1:
        fail("nothing to measure: give --plans, --law and/or --primitives (and --every >= 1)")
    for path in [*args.plans, *([args.law] if args.law else []), args.mocap]:
        if not path.is_file():
            fail(f"no such file: {path}")
    from agents.npmp import clip_files

    try:
        missing = sorted(set(args.snippets) - set(clip_files([str(args.mocap)])))
    except ConfigError as e:
        fail(str(e))
    if missing:
        fail(f"{', '.join(missing)}: not in {args.mocap}")
    results = resumed_results(args.results, Path(__file__).name, argv, mocap=str(args.mocap))
    rows = results.setdefault("snippets", {})
    for snippet in args.snippets:
        row = rows.setdefault(snippet, {})
        try:
            reference = reference_headings(snippet, args.mocap)
        except (KeyError, ValueError, OSError) as e:
            fail(f"{snippet}: {str(e).splitlines()[0]}")
        for data in args.plans:
            try:
                states = plan_states(data, snippet)
            except (ConfigError, ValueError, OSError):
                continue
            walker = plan_headings(states)
            n = min(len(walker), len(reference))
            row[f"plan:{data}"] = {**summary(heading_errors(walker[:n], reference[:n]), n, len(reference), args.every),
                                   **sinking(states[:, 3], reference_root_heights(snippet, args.mocap)),
                                   **pace(states[:, 1:3], reference_root_positions(snippet, args.mocap)),
                                   **blind_from(tracking_errors(states, snippet, args.mocap))}
            break
        else:
            if args.plans:
                print(f"{snippet}: no planner run in {', '.join(map(str, args.plans))}", flush=True)
        controllers = ([(f"law:{args.law}", law_controller, args.law)] if args.law else []) + \
            [(f"primitives:{path}", primitives_controller, path) for path in args.primitives]
        for name, build, source in controllers:
            try:
                env, make_actor = build(source, snippet, args.mocap)
            except (EnvError, ConfigError, ModuleFileError, ValueError, OSError) as e:
                fail(f"{name}: {snippet}: {str(e).splitlines()[0]}")
            try:
                hook = Upright()   # records the walker's and the reference's heading after every step
                steps = upright_episode(env, make_actor(), 0.0, 0, observe=hook)["steps"]
                errors = heading_errors(hook.headings[:steps + 1], hook.reference_headings[:steps + 1])
                row[name] = summary(errors, steps, env.last_step, args.every)
            finally:
                env.close()
        save_results(args.results, results)
        for name, s in row.items():
            sank = (f"; root at most {s['root_below_reference_max_m']} m below the reference's (frame "
                    f"{s['root_below_at_frame']}), more than 0.3 m on {s['frames_root_below_0.3m']} frames"
                    if "root_below_reference_max_m" in s else "")
            sank += (f"; {s['speed_ratio']} of the reference's ground speed ({s[f'speed_ratio_last_{PACE_TAIL}']} "
                     f"over its last {PACE_TAIL} frames), {s['root_off_reference_at_end_m']} m from its root at the "
                     f"end" if "speed_ratio" in s else "")
            sank += (f"; tracking error over the termination threshold from frame "
                     f"{s['first_frame_over_termination_error']} ({s['frames_over_termination_error']} frames)"
                     if s.get("frames_over_termination_error") else "")
            print(f"{snippet} {name}: {s['frames']} of {s['of']} frames, heading off by at most "
                  f"{s['max_abs_degrees']} degrees (frame {s['at_frame']}){sank}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
