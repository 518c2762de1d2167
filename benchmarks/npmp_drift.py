"""Do the clip primitives drift before they fall? (issue 13; docs/npmp.md, "Teachers that lose the pace").

Through ``--primitives`` under the scripted ``nearest`` choice (``benchmarks/npmp_clips_humanoid.py``, the same
episodes: the same clips, start, blend, lead and action noise), every control step records how the walker's proprio
state compares with the frame of the chain it should be at: the RMS joint-angle error (rad), the phase lag (the
chain frame within ``WINDOW`` frames whose joint angles lie nearest the walker's, minus the current one: negative
is behind), the pelvis height error (``walker/body_height``, m) and the root's ground speed (m/s). Reported: each
measure's median per episode over steps [t, t + 30) for t = 0, 30, ... (episodes still up), over the 5 steps ending
20, 40, ... steps before each fall, and, per segment of the chain (the n-th choice), how many episodes entered it
and how many fell in it: a walker that drifts (posture, phase) has errors that grow with time; one that meets a
hazard falls abruptly where it meets it.

    python benchmarks/npmp_drift.py --primitives data/primitives/npmp-clips --episodes 60 \\
        --results benchmarks/results/npmp_drift.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.npmp_clips_humanoid import NoisyCommands, episode  # noqa: E402
from benchmarks.runs import fail, resumed_results, save_results  # noqa: E402

WINDOW = 30                 # frames either side of the current one searched for the phase
JOINTS, HEIGHT = "walker/joints_pos", "walker/body_height"
MEASURES = ("joint_error", "phase_lag", "height_error", "speed")


def recorder(env, record: dict):
    """The observer ``episode`` calls after every control step: appends the step's measures to ``record``."""
    slices = env.unwrapped.observation_slices("proprio")
    joints, height = slices[JOINTS], slices[HEIGHT]

    def observe(unwrapped, t: int) -> None:
        xy = np.array(unwrapped.physics.data.qpos[:2])
        if t > 0:
            state = np.asarray(env._obs["proprio"], np.float64).ravel()
            chain = np.asarray(env.chain._states, np.float64)
            now = min(t, len(chain) - 1)
            lo, hi = max(0, now - WINDOW), min(len(chain), now + WINDOW + 1)
            error = np.sqrt(np.mean((chain[lo:hi, joints] - state[joints]) ** 2, axis=1))
            record["joint_error"].append(round(float(error[now - lo]), 4))
            record["phase_lag"].append(int(lo + np.argmin(error) - now))
            record["height_error"].append(round(float(state[height][0] - chain[now, height][0]), 4))
            record["speed"].append(round(float(np.linalg.norm(xy - record["_xy"]) / env.unwrapped.control_timestep()), 3))
        record["_xy"] = xy

    return observe


def summarise(episodes: list[dict]) -> dict:
    by_time, before_fall = {}, {}
    for name in MEASURES:
        by_time[name] = {}
        for t0 in range(0, 300, 30):
            values = [np.median(e[name][t0:t0 + 30]) for e in episodes if len(e[name]) >= t0 + 30]
            if values:
                by_time[name][t0] = {"median": round(float(np.median(values)), 3), "episodes": len(values)}
        fell = [e for e in episodes if e["fell"]]
        before_fall[name] = {back: round(float(np.median([np.median(e[name][-back:len(e[name]) - back + 5])
                                                          for e in fell if len(e[name]) >= back])), 3)
                             for back in (120, 100, 80, 60, 40, 20, 5) if any(len(e[name]) >= back for e in fell)}
    entered, fallen = {}, {}
    for e in episodes:
        starts = np.cumsum([0] + [frames for _, _, frames in e["chain"]])
        for i in range(len(e["chain"])):
            if starts[i] <= e["steps"]:
                entered[i] = entered.get(i, 0) + 1
        if e["fell"]:
            i = int(np.searchsorted(starts, e["steps"], side="right") - 1)
            fallen[i] = fallen.get(i, 0) + 1
    segments = {i: {"entered": n, "fell_in": fallen.get(i, 0)} for i, n in sorted(entered.items())}
    return {"by_time": by_time, "before_fall": before_fall, "segments": segments}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--primitives", type=Path, required=True)
    p.add_argument("--mocap", type=Path, default=ROOT / "data" / "mocap" / "cmu_turns.h5")
    p.add_argument("--clips", nargs="+", default=["16_27-0", "16_27-0-mirror"])
    p.add_argument("--start-frames", type=int, default=20)
    p.add_argument("--blend", type=int, default=7)
    p.add_argument("--lead", type=int, default=63)
    p.add_argument("--action-noise", type=float, default=0.02)
    p.add_argument("--episodes", type=int, default=60)
    p.add_argument("--first-seed", type=int, default=50000)
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "npmp_drift.json")
    args = p.parse_args(argv)

    import torch

    import envs
    from agents.config import ConfigError
    from agents.npmp import clip_graph, parse_clip_choices
    from envs import EnvError
    from priors.npmp import ModuleFileError, load_primitives
    from priors.reuse import ClipChoiceActionEnv

    torch.set_num_threads(1)
    if args.episodes < 1 or args.first_seed < 0 or args.action_noise < 0:
        fail("need --episodes >= 1, --first-seed >= 0 and --action-noise >= 0")
    try:
        clips, frames = parse_clip_choices(args.clips)
        graph, where = clip_graph(clips, [str(args.mocap)])
        model, meta = load_primitives(args.primitives)
        walker = envs.make("humanoid", seed=0, start_snippet=clips[0], ref_path=str(where[clips[0]]))
        env = ClipChoiceActionEnv(NoisyCommands(walker, args.action_noise) if args.action_noise else walker, model,
                                  graph, clips, clips[0], meta["obs_groups"], args.start_frames, lead=args.lead,
                                  segment_frames=frames, blend=args.blend)
    except (ConfigError, EnvError, ModuleFileError, ValueError, OSError) as e:
        fail(str(e).splitlines()[0])
    results = resumed_results(args.results, Path(__file__).name, argv, primitives=str(args.primitives))
    rows = results.setdefault("episodes", {})
    for seed in range(args.first_seed, args.first_seed + args.episodes):
        if str(seed) in rows:
            continue
        record = {name: [] for name in MEASURES}
        walked = episode(env, "nearest", seed, 2, observe=recorder(env, record))
        record.pop("_xy")
        rows[str(seed)] = {**record, **{k: walked[k] for k in ("steps", "fell", "targets_reached", "chain")}}
        save_results(args.results, results)
    mine = [rows[str(s)] for s in range(args.first_seed, args.first_seed + args.episodes)]
    results["summary"] = summarise(mine)
    save_results(args.results, results)
    s = results["summary"]
    for name in MEASURES:
        print(f"{name}: by time " + " ".join(f"{t}:{v['median']}" for t, v in s["by_time"][name].items())
              + " | before a fall " + " ".join(f"-{b}:{v}" for b, v in s["before_fall"][name].items()))
    print("segments (entered, fell in): " + " ".join(f"{i}:{v['entered']},{v['fell_in']}"
                                                    for i, v in s["segments"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
