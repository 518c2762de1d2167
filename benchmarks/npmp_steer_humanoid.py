"""Targets reached on `humanoid` by primitives steered through a yaw rate (issue 13; docs/npmp.md, "Steering on
`humanoid`").

The headline task (``humanoid``: one target at a time, anywhere in the 8 m square at least 2 m from the walker,
reached when the walker stays within 1 m of it for 10 steps, after which it moves; 25 s; a fall ends the episode)
with every episode started on the first frame of a looped walk (``start_snippet``) and the walker driven by
``priors.reuse.YawRateActionEnv``: the primitives follow that walk bent at a yaw rate the controller chooses. Two
scripted controllers, no learning, to show what the primitives allow before any high level is trained:
- ``straight``: rate 0 (the walk as it is: targets reached by walking into them, the chance level);
- ``target``: the rate toward the target, ``--gain`` deg/s per degree of its bearing from the walking direction
  (read from the task's egocentric target position, as a learned policy would see it), at most ``--max-rate``;
- ``planned``: predictive sampling over the rate with the simulator itself (as benchmarks/npmp_prior_samples.py
  plans over latents): every ``--replan`` s each of ``--candidates`` wanted rates is held for ``--horizon`` s from
  the captured episode, and the one that does not fall, earns the most reward (steps on a target) and ends nearest
  the target is followed. What the primitives allow through this interface, not a policy anyone learned.
Reported per primitives, controller and episode (seeds 0..N-1, the same targets and start for every controller):
targets reached, steps (of 834), whether it fell, the step the first target was reached, the mean |rate|, and how
far the walker turned (degrees, counter-clockwise positive) against the turn its reference was bent by, and the
first target's distance (m) and bearing (degrees) at the start.

    python benchmarks/npmp_steer_humanoid.py --mocap runs/npmp/steer/walk26.h5 --walk 07_01-0-loop26 \\
        --primitives runs/npmp/walk4/wb_d7_s1 --controllers straight target --episodes 10

``--reach RESETS`` also tells how much turning the task asks for: over that many resets, the first target's
distance and bearing, and for a walker walking forward at ``--speed`` m/s (07_01's looped walk: about 34 m in 23.8 s)
and turning at most at a rate, the share of first targets that one arc from the start can reach (the target outside
the turning circle, within the task's 1 m: d + 1 >= 2 r |sin(bearing)|, r = speed / rate). No primitives are run.

Results are kept per primitives, controller and episode: a rerun measures only what the file lacks. ``--frames DIR``
draws the chosen episodes again (the same: seeded, deterministic physics) as PNG strips of the walker's back camera,
a frame every second: ``<primitives>__<controller>__<episode>.png``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.npmp_steer_student import path_reading_primitives  # noqa: E402
from benchmarks.runs import Strip, fail, resumed_results, save_results  # noqa: E402
from priors.npmp.reference import CONTROL_STEP_SECONDS  # noqa: E402

CONTROLLERS = ("straight", "target", "planned")


def target_bearing(task_features: np.ndarray) -> float:
    """Degrees from the walking direction to the target, counter-clockwise positive, from the task's egocentric
    target position (the CMU humanoid walks along its root's -y axis: benchmarks/npmp_steer_law.py ``FACING``)."""
    x, y = float(task_features[0]), float(task_features[1])
    return float(np.degrees(np.arctan2(x, -y)))


class RatePlanner:
    """``planned`` (module docstring): ``wanted(step)`` in deg/s, replanned from the env's captured episode."""

    def __init__(self, env, candidates: list[float], horizon_steps: int, replan_steps: int):
        self.env, self.candidates, self.horizon, self.replan = env, candidates, horizon_steps, replan_steps
        self.rate = 0.0

    def _score(self, rate: float) -> tuple:
        reward, fell = 0.0, False
        for _ in range(self.horizon):
            _, r, terminated, truncated, info = self.env.step(np.array([rate / self.env.max_rate], np.float32))
            reward += float(r)
            if terminated or truncated:
                fell = bool(info.get("fell", False))
                break
        task = self.env.unwrapped.task
        return not fell, reward, -task.objective.planar_distance(task, self.env.unwrapped.physics)

    def wanted(self, step: int) -> float:
        if step % self.replan == 0:
            captured = self.env.get_state()
            scores = []
            for rate in self.candidates:
                self.env.set_state(captured)
                scores.append(self._score(rate))
            self.env.set_state(captured)
            self.rate = self.candidates[max(range(len(scores)), key=scores.__getitem__)]
        return self.rate


def episode(env, controller: str, gain: float, seed: int, observe=None, planner: dict | None = None) -> dict:
    """One episode of the steered walk under ``controller`` (module docstring); ``planner``: RatePlanner's
    arguments for ``planned``."""
    from envs.mocap.tracking import heading

    def yaw() -> float:
        return heading(env.unwrapped.physics.data.qpos[3:7])

    obs, _ = env.reset(seed=seed)
    steps, first, info, commanded, turned, last_yaw = 0, None, {}, 0.0, 0.0, yaw()
    plan = RatePlanner(env, **planner) if controller == "planned" else None
    start = (round(float(np.hypot(*obs["task"][:2])), 2), round(target_bearing(obs["task"]), 1))
    if observe is not None:
        observe(env.unwrapped, steps)
    while True:
        wanted = (gain * target_bearing(obs["task"]) if controller == "target" else
                  plan.wanted(steps) if controller == "planned" else 0.0)
        obs, _, terminated, truncated, info = env.step(np.array([np.clip(wanted / env.max_rate, -1, 1)], np.float32))
        steps += 1
        commanded += info["yaw_rate"] * CONTROL_STEP_SECONDS
        now = yaw()
        turned, last_yaw = turned + float(np.angle(np.exp(1j * (now - last_yaw)))), now
        if observe is not None:
            observe(env.unwrapped, steps)
        reached = env.unwrapped.task.objective.targets_reached
        first = steps if first is None and reached else first
        if terminated or truncated:
            break
    metrics = info["episode_metrics"]
    return {"targets_reached": int(metrics["task/targets_reached"]), "steps": steps, "fell": bool(info["fell"]),
            "first_target_step": first, "mean_abs_rate": round(metrics["steer/mean_abs_rate"], 2),
            "turn_degrees": round(float(np.degrees(turned)), 1), "commanded_turn_degrees": round(commanded, 1),
            "first_target_m_and_bearing": start}


REACH_RATES = (7.5, 15.0, 30.0, 45.0, 90.0)   # deg/s


def reach(env, resets: int, speed: float) -> dict:
    """The first targets of ``resets`` episodes, and the share one arc reaches at each of ``REACH_RATES`` (module
    docstring)."""
    distance, bearing = [], []
    for seed in range(resets):
        obs, _ = env.reset(seed=seed)
        distance.append(float(np.hypot(*obs["task"][:2])))
        bearing.append(np.radians(target_bearing(obs["task"])))
    distance, bearing = np.array(distance), np.array(bearing)
    shares = {}
    for rate in REACH_RATES:
        radius = speed / np.radians(rate)
        shares[f"{rate:g}"] = {"radius_m": round(float(radius), 2), "share_reachable": round(float(np.mean(
            distance + 1.0 >= 2 * radius * np.abs(np.sin(bearing)))), 3)}
    return {"resets": resets, "speed_m_per_s": speed,
            "first_target_m_quartiles": [round(float(q), 2) for q in np.percentile(distance, [25, 50, 75])],
            "median_abs_bearing_degrees": round(float(np.degrees(np.median(np.abs(bearing)))), 1),
            "by_max_rate_deg_per_s": shares}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mocap", type=Path, required=True, help="the mocap file with the looped walk and its two arcs")
    p.add_argument("--walk", required=True, help="a looped walk lasting the episode (25 s), with its arcs in --mocap")
    p.add_argument("--rate", default="15", help="the arcs' bend in deg/s, as in their names (<walk>-left<rate>)")
    p.add_argument("--style", choices=("pivot", "stepped"), default="pivot",
                   help="how the arcs were bent (envs.mocap.convert --curve-style; stepped: <walk>-stepleft<rate>)")
    p.add_argument("--primitives", type=Path, nargs="*", default=[],
                   help="primitives that read the reference's path (distill --path-offsets)")
    p.add_argument("--controllers", nargs="+", choices=CONTROLLERS, default=list(CONTROLLERS))
    p.add_argument("--gain", type=float, default=1.0, help="target: deg/s of yaw rate per degree of bearing")
    p.add_argument("--max-rate", type=float, help="the largest rate asked for, deg/s (default: the arcs' rate)")
    p.add_argument("--slew", type=float, default=15.0, help="the most the rate changes, deg/s per s")
    p.add_argument("--candidates", type=float, nargs="+", default=[-15.0, -7.5, 0.0, 7.5, 15.0],
                   help="planned: the wanted rates tried (deg/s)")
    p.add_argument("--horizon", type=float, default=6.0, help="planned: seconds each candidate is held")
    p.add_argument("--replan", type=float, default=1.0, help="planned: seconds between plans")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "npmp_steer_humanoid.json")
    p.add_argument("--frames", type=Path, help="a folder for one PNG strip per episode; measures them again")
    p.add_argument("--reach", type=int, default=0, metavar="RESETS",
                   help="also: the share of first targets one arc reaches, over this many resets (module docstring)")
    p.add_argument("--speed", type=float, default=1.4, help="--reach: the walking speed, m/s")
    args = p.parse_args(argv)

    import torch

    import envs
    from envs import EnvError
    from agents.config import ConfigError
    from agents.npmp import walk_references
    from priors.npmp import ModuleFileError
    from priors.reuse import YawRateActionEnv

    torch.set_num_threads(1)
    try:
        arc_rate = float(args.rate)
    except ValueError:
        arc_rate = float("nan")
    max_rate = arc_rate if args.max_rate is None else args.max_rate
    if (not arc_rate > 0 or not args.gain > 0 or not args.slew > 0 or not max_rate > 0 or args.episodes < 1
            or not args.horizon >= CONTROL_STEP_SECONDS or not args.replan >= CONTROL_STEP_SECONDS
            or ("planned" in args.controllers and max(abs(c) for c in args.candidates) > max_rate)):
        fail(f"need --rate > 0 (the arcs' yaw rate, as in their names; got {args.rate}), --gain > 0, --slew > 0, "
             "--max-rate > 0, --episodes >= 1, --horizon and --replan of a control step (0.03 s) or more, and "
             "--candidates within --max-rate")
    if not args.mocap.is_file():
        fail(f"no such file: {args.mocap}")
    if args.reach < 0 or not args.speed > 0 or not (args.reach or args.primitives):
        fail("need --primitives, --reach RESETS or both, --reach >= 0 and --speed > 0")
    results = resumed_results(args.results, Path(__file__).name, argv, mocap=str(args.mocap), walk=args.walk)
    if args.reach:
        try:
            env = envs.make("humanoid", seed=0, start_snippet=args.walk, ref_path=str(args.mocap))
        except EnvError as e:
            fail(f"{args.walk}: {str(e).splitlines()[0]}")
        results["reach"] = reach(env, args.reach, args.speed)
        env.close()
        save_results(args.results, results)
        print(f"reach: {results['reach']}", flush=True)
    for path in args.primitives:
        model, meta = path_reading_primitives(path)
        rows = results.setdefault("primitives", {}).setdefault(str(path), {})
        planner = {"candidates": args.candidates, "horizon_steps": round(args.horizon / CONTROL_STEP_SECONDS),
                   "replan_steps": round(args.replan / CONTROL_STEP_SECONDS)}
        named = {"target": f"target, gain {args.gain:g}, max rate {max_rate:g}",
                 "planned": f"planned, candidates {' '.join(f'{c:g}' for c in args.candidates)}, horizon "
                            f"{args.horizon:g}, replan {args.replan:g}"}
        style = "" if args.style == "pivot" else f", {args.style} arcs"   # the keys measured before stay as they were
        keys = {c: named.get(c, c) + f", rate {args.rate}, slew {args.slew:g}{style}" for c in args.controllers}
        todo = [(c, e) for c in args.controllers for e in range(args.episodes)
                if args.frames or str(e) not in rows.get(keys[c], {})]
        if not todo:
            continue
        try:
            references = walk_references(args.walk, arc_rate, str(args.mocap), style=args.style)
            env = YawRateActionEnv(envs.make("humanoid", seed=0, start_snippet=args.walk, ref_path=str(args.mocap)),
                                   model, references, meta["obs_groups"], arc_rate, max_rate, args.slew)
        except (ConfigError, EnvError, ModuleFileError, ValueError, KeyError, OSError) as e:
            fail(f"{args.walk}: {str(e).splitlines()[0]}")
        measure_episodes(env, lambda controller, seed, strip: episode(env, controller, args.gain, seed,
                                                                      observe=strip, planner=planner),
                         path, todo, keys, rows, results, args.results, args.frames)
    return 0


def measure_episodes(env, run_episode, path, todo, keys, rows, results, results_path, frames) -> None:
    """Each (controller, seed) of ``todo`` run by ``run_episode(controller, seed, strip)`` -> its row, kept in
    ``rows[keys[controller]][seed]`` and written to ``results_path`` after every episode (drawn into ``frames``
    when given); then one summary line per controller. Closes ``env``."""
    try:
        for controller, seed in todo:
            strip = Strip() if frames else None
            row = run_episode(controller, seed, strip)
            if strip is not None:
                strip.write(frames / f"{str(path).replace('/', '_')}__{controller}__{seed}.png")
            rows.setdefault(keys[controller], {})[str(seed)] = row
            save_results(results_path, results)   # after every episode
            print(f"{path}: {keys[controller]}, episode {seed}: {row}", flush=True)
    finally:
        env.close()
    for key in keys.values():
        episodes = list(rows.get(key, {}).values())
        print(f"{path}: {key}: {sum(e['targets_reached'] for e in episodes)} targets in {len(episodes)} "
              f"episodes, median {statistics.median(e['steps'] for e in episodes)} steps, "
              f"{sum(e['fell'] for e in episodes)} falls", flush=True)


if __name__ == "__main__":
    sys.exit(main())
