"""Can the periodic LQR law of a straight looped walk steer? (issue 13; docs/npmp.md, "Rounds 5 and 6, a teacher
that steers, and looped arcs").

The students walk looped walks for 10 s but cannot turn on command, and a walk to a target needs turns. The cheapest
teacher that turns would be the straight walk's own periodic law (agents/lqr.py ``PeriodicFeedbackTracker``) with its
followed nominal turned toward a commanded heading (``command(t, state, steer)``, ``follow_walker``): its feedback
on the heading error then turns the walker, and no planner run of a curved walk is needed. Here it walks each looped
walk with the tracking ending off (as benchmarks/npmp_noise.py) under a heading command, the nominal turned by the
command's error clipped to +-``--steer-limit`` rad once the periodic law acts:
- ``hold``: the start heading;
- ``arc<R>``: turn at R degrees a second from 1 s on (an arc of radius v / R at walking speed v);
- ``step<D>``: D degrees more from 2 s on;
- ``to<D>at<B>``: toward a target D m from the start, B degrees left of the start heading (right if negative),
  from 2 s on (the start heading before); reached within ``TARGET_RADIUS`` m (the step is reported), after which
  the heading toward it is held.
Reported per walk, command (with the limit) and noise level: the steps upright (of 328 on a 10 s loop), how far the
walker turned and the command had at that step, and the median absolute heading error from the command's start to
the fall.

    python benchmarks/npmp_steer_law.py --mocap runs/npmp/loops/mocap.h5 --law runs/npmp/cos/ec_d4.h5 \\
        --snippets 08_02-0-loop10 07_01-0-loop10 --commands hold arc15 step45 --noise 0 0.03 --seeds 2

Results are kept per walk, command and noise level: a rerun measures only what the file lacks.
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.npmp_long import CONTROL_STEP_SECONDS  # noqa: E402
from benchmarks.npmp_noise import law_expert, upright_episode  # noqa: E402
from benchmarks.runs import fail, resumed_results, save_results  # noqa: E402

COMMAND = re.compile(r"hold|arc(-?\d+(\.\d+)?)|step(-?\d+(\.\d+)?)|to(\d+(\.\d+)?)at(-?\d+(\.\d+)?)")
TARGET = re.compile(r"to(\d+(?:\.\d+)?)at(-?\d+(?:\.\d+)?)")
TARGET_RADIUS = 1.0   # m: the humanoid go-to-target task's (envs/locomotion.py)
TARGET_AFTER = 2.0    # s: steering toward a target begins, as a step command does
# The CMU humanoid's root x axis points to its left: it walks along the root's -y axis (07_01's reference travels at
# -94 degrees from its root's x axis). Headings here are the walking direction, so targets lie where it walks.
FACING = -np.pi / 2


def commanded_turn(command: str, seconds: float) -> tuple[float, bool]:
    """(degrees the ``command`` turns the heading by at time ``seconds`` from the start, whether it has begun)."""
    if command.startswith("arc"):
        return float(command[3:]) * max(0.0, seconds - 1.0), seconds >= 1.0
    if command.startswith("step"):
        return (float(command[4:]), True) if seconds >= 2.0 else (0.0, False)
    if command.startswith("to"):   # the target's bearing from the start
        return float(TARGET.fullmatch(command).group(2)), seconds >= TARGET_AFTER
    return 0.0, True


class HeadingCommand:
    """The heading error (rad, wrapped) of the walker in ``env`` against ``command``'s heading from the walker's own
    start heading (toward its target, for ``to<D>at<B>``; headings are the walking direction, ``FACING``);
    ``errors``: its absolute value (degrees) at every step since the command began; ``reached_at``: the step a
    target was first within ``TARGET_RADIUS`` (None before); ``closest``: the nearest the walker came to its target (m; inf without one)."""

    def __init__(self, env, command: str):
        self.env, self.command = env, command
        self.start, self.errors, self.reached_at, self.target, self.held = None, [], None, None, 0.0
        self.closest = np.inf

    def error(self, t: int) -> float:
        from envs.mocap.tracking import heading

        qpos = self.env.physics.data.qpos
        yaw, position = heading(qpos[3:7]) + FACING, np.array(qpos[:2], dtype=float)
        if self.start is None:
            self.start, target = yaw, TARGET.fullmatch(self.command)
            if target:
                distance, bearing = float(target.group(1)), self.start + np.radians(float(target.group(2)))
                self.target = position + distance * np.array([np.cos(bearing), np.sin(bearing)])
        if self.target is not None:
            away = self.target - position
            distance = float(np.hypot(*away))
            self.closest = min(distance, self.closest)
            if self.reached_at is None and distance < TARGET_RADIUS:
                self.reached_at, self.held = t, float(np.arctan2(away[1], away[0]))
            begun = t * CONTROL_STEP_SECONDS >= TARGET_AFTER   # the first strides are the clip's own
            wanted = (self.held if self.reached_at is not None else float(np.arctan2(away[1], away[0])) if begun
                      else self.start)
        else:
            turn, begun = commanded_turn(self.command, t * CONTROL_STEP_SECONDS)
            wanted = self.start + np.radians(turn)
        error = float(np.angle(np.exp(1j * (wanted - yaw))))
        if begun:
            self.errors.append(abs(np.degrees(error)))
        return error


class SteeredLaw(HeadingCommand):
    """``act(t, proprio)`` for ``upright_episode``: the law's command with its nominal turned toward ``command``'s
    heading (module docstring), reading the simulator's state."""

    def __init__(self, expert, env, command: str, limit: float):
        super().__init__(env, command)
        self.expert, self.limit = expert, limit

    def __call__(self, t: int, proprio) -> np.ndarray:
        from agents.lqr import get_state

        physics = self.env.physics
        state = get_state(physics.model.ptr, physics.data.ptr)
        steer = float(np.clip(self.error(t), -self.limit, self.limit))
        return self.expert.tracker.command(self.env.time_step, state, steer).astype(np.float32)


def heading_rows(episodes: list[dict], command: str, acts: list[HeadingCommand]) -> None:
    """Each episode's commanded turn at its end, median heading error, the step it reached its target (None: not
    reached, or no target) and the nearest it came to it (m), added to it."""
    for episode, act in zip(episodes, acts):
        seconds = episode["steps"] * CONTROL_STEP_SECONDS
        episode["commanded_turn_degrees"] = round(commanded_turn(command, seconds)[0], 1)
        episode["median_heading_error_degrees"] = round(float(statistics.median(act.errors)) if act.errors
                                                        else float("nan"), 1)
        episode["reached_at_step"] = act.reached_at
        episode["closest_to_target_m"] = None if act.target is None else round(act.closest, 2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mocap", type=Path, required=True, help="the mocap file with the looped walks (docs/mocap.md)")
    p.add_argument("--law", type=Path, required=True,
                   help="a data file collected with --expert-policy lqr --lqr-set periodic=true on these walks")
    p.add_argument("--snippets", nargs="+", required=True, help="looped walks")
    p.add_argument("--commands", nargs="+", default=["hold", "arc15", "step45"],
                   help="heading commands: hold, arc<deg/s>, step<deg>, to<m>at<deg> (module docstring)")
    p.add_argument("--steer-limit", type=float, default=0.2, help="the most the nominal is turned (rad)")
    p.add_argument("--noise", type=float, nargs="+", default=[0.0, 0.03])
    p.add_argument("--seeds", type=int, default=2, help="episodes per noise level above 0")
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "npmp_steer_law.json")
    args = p.parse_args(argv)

    from agents.config import ConfigError
    from agents.lqr import PeriodicFeedbackTracker
    from envs import EnvError

    bad = [c for c in args.commands if not COMMAND.fullmatch(c)]
    if bad or not args.steer_limit > 0 or min(args.noise) < 0 or args.seeds < 1:
        fail(f"need commands hold, arc<deg/s>, step<deg> or to<m>at<deg> (got {', '.join(bad) or 'those'}), "
             "--steer-limit > 0, --noise >= 0 and --seeds >= 1")
    for path in (args.law, args.mocap):
        if not path.is_file():
            fail(f"no such file: {path}")
    results = resumed_results(args.results, Path(__file__).name, argv, law=str(args.law), mocap=str(args.mocap))
    walks = results.setdefault("walks", {})
    for snippet in args.snippets:
        rows = walks.setdefault(snippet, {})
        keys = {c: f"{c}, limit {args.steer_limit:g}" for c in args.commands}   # rows per command and limit
        todo = [(c, n) for c in args.commands for n in args.noise if f"{n:g}" not in rows.get(keys[c], {})]
        if not todo:
            continue
        try:
            expert, env = law_expert(args.law, snippet, args.mocap)
        except (EnvError, ConfigError, ValueError, OSError) as e:
            fail(f"{snippet}: {str(e).splitlines()[0]}")
        if not isinstance(expert.tracker, PeriodicFeedbackTracker):
            fail(f"{args.law} holds no periodic law for {snippet} (collect it with --lqr-set periodic=true)")
        try:
            for command, noise in todo:
                episodes, acts = [], []
                for seed in range(args.seeds if noise else 1):
                    acts.append(SteeredLaw(expert, env, command, args.steer_limit))
                    episodes.append(upright_episode(env, acts[-1], noise, seed))
                heading_rows(episodes, command, acts)
                rows.setdefault(keys[command], {})[f"{noise:g}"] = {
                    "of": env.last_step, **{key: [e[key] for e in episodes] for key in (
                        "steps", "turn_degrees", "commanded_turn_degrees", "median_heading_error_degrees",
                        "travelled_m", "reached_at_step", "closest_to_target_m")}}
                save_results(args.results, results)   # after every command and noise level
                print(f"{snippet}: {command}, noise {noise:g}: upright {[e['steps'] for e in episodes]}, turned "
                      f"{[e['turn_degrees'] for e in episodes]} of {[e['commanded_turn_degrees'] for e in episodes]} "
                      "degrees", flush=True)
        finally:
            env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
