"""Can primitives that read the path be steered by the reference they are shown? (issue 13; docs/npmp.md, "Every
walk bent both ways, and a student steered by the reference it reads").

A student distilled on a looped walk and on the same walk bent both ways (``envs.mocap.convert --curve R --loop``:
the arcs ``<walk>-left<R>`` and ``<walk>-right<R>`` share the walk's frames and timing; only the root turns) reads, in
its encoder, the reference's states ahead and, with ``path_offsets``, the path ahead. A controller that picks at
every step which of the three references the encoder reads (the latent carries over) steers it without a new
high-level policy: the left arc while the heading error is above ``--deadband`` degrees, the right arc below minus
that, the straight walk in between, each read for at least ``--dwell`` seconds before another. It walks the straight
walk's env with the tracking ending off (as benchmarks/npmp_noise.py) under the heading commands of
benchmarks/npmp_steer_law.py (``hold``, ``arc<deg/s>``, ``step<deg>``, and ``to<D>at<B>``: toward a target D m
away, B degrees left of the start heading). Reported per primitives, walk, command and noise level: the steps
upright, how far the walker turned (at the fall and at every whole second upright) and the command had at that
step, the median absolute heading error since the command began, the step a target was reached (within 1 m, as in
the go-to-target task), and the share of steps the encoder read each reference.

With ``--steer rate`` the controller instead bends the straight walk at a yaw rate it chooses, so the reference the
encoder reads turns gradually rather than jumping between three: the rate follows ``--gain`` times the heading
error, at most the arcs' rate either way and changed by at most ``--slew`` deg/s per second, and steering begins
at 2 s (the clip's lead-in strides are its own). The encoder reads the straight walk's states moved toward the
left (or right) arc's by |rate| / the arcs' rate (the bent walk's frames differ from the straight one's in the
root's turning only, which is linear in the rate), and the path ahead as the straight walk's path bent from the
current frame on at the current rate (``model.reference_path`` on that local path: at the arcs' own rate both are
exactly the arc's input).

This is a departure from the seed (its high level acts on the latent, eq 8.2): here the high level chooses the
reference, which the primitives were trained to follow.

    python benchmarks/npmp_steer_student.py --mocap runs/npmp/loops/mocap15.h5 --primitives runs/npmp/walk4/wb_d5_s1 \\
        --snippets 07_01-0-loop10 --rate 15 --commands hold step45 step-45 --noise 0 0.03 --seeds 3

Results are kept per primitives, walk, command and noise level: a rerun measures only what the file lacks. With
``--frames DIR`` the chosen commands and noise levels are run again (the same episodes: seeded noise, deterministic
physics) and each episode is drawn as a PNG strip of the walker's back camera, a frame every second:
``<primitives>__<walk>__<command>__noise<n>__<episode>.png``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.npmp_long import CONTROL_STEP_SECONDS  # noqa: E402
from benchmarks.npmp_noise import NO_TRACKING_END, upright_episode  # noqa: E402
from benchmarks.npmp_steer_law import COMMAND, TARGET_AFTER, HeadingCommand, heading_rows  # noqa: E402
from benchmarks.runs import Strip, fail, resumed_results, save_results  # noqa: E402

SIDES = ("straight", "left", "right")


class SteeredStudent(HeadingCommand):
    """``act(t, proprio)`` for ``upright_episode``: the decoder's clipped mean, its latent from the encoder reading
    the reference the heading error picks (module docstring); ``reads``: which reference at every step."""

    def __init__(self, model, inputs: dict, env, command: str, deadband_degrees: float, dwell_steps: int = 0):
        from pipelines.npmp.evaluate import closed_loop_latent, decoder_actor

        super().__init__(env, command)
        self.deadband, self.dwell, self.reads, self.run = np.radians(deadband_degrees), dwell_steps, [], 0
        self.act = decoder_actor(model, closed_loop_latent(model, lambda t: inputs[self.reads[-1]](t)))

    def __call__(self, t: int, proprio) -> np.ndarray:
        error = self.error(t)
        wanted = "left" if error > self.deadband else "right" if error < -self.deadband else "straight"
        # the reference read for fewer than ``dwell`` steps in a row is kept
        side = self.reads[-1] if self.reads and self.run < self.dwell else wanted
        self.run = self.run + 1 if self.reads and side == self.reads[-1] else 1
        self.reads.append(side)
        return self.act(t, proprio)


class RateSteeredStudent(HeadingCommand):
    """``act(t, proprio)`` for ``upright_episode`` with ``--steer rate``: the decoder's clipped mean, its latent from
    the encoder reading the straight walk bent at the yaw rate the heading error asks for (module docstring);
    ``rates``: the rate at every step (deg/s)."""

    def __init__(self, model, references: dict, env, command: str, arc_rate: float, gain: float, slew: float):
        from pipelines.npmp.evaluate import closed_loop_latent, decoder_actor
        from priors.npmp.reference import bent_reference_input

        super().__init__(env, command)
        self.arc_rate, self.gain, self.slew, self.rates = arc_rate, gain, slew * CONTROL_STEP_SECONDS, []
        read = bent_reference_input(model, references, arc_rate)
        self.act = decoder_actor(model, closed_loop_latent(model, lambda t: read(t, self.rates[-1])))

    def __call__(self, t: int, proprio) -> np.ndarray:
        error = np.degrees(self.error(t))
        begun = t * CONTROL_STEP_SECONDS >= TARGET_AFTER   # the clip's lead-in strides are its own
        wanted = float(np.clip(self.gain * error, -self.arc_rate, self.arc_rate)) if begun else 0.0
        rate = self.rates[-1] if self.rates else 0.0
        self.rates.append(rate + float(np.clip(wanted - rate, -self.slew, self.slew)))
        return self.act(t, proprio)


def path_reading_primitives(path: Path):
    """(model, meta) of the primitives at ``path``, or ``fail`` where they cannot be loaded or do not read the
    reference's path (then the reference they are shown cannot steer them)."""
    from priors.npmp import ModuleFileError, load_primitives

    try:
        model, meta = load_primitives(path)
    except (ModuleFileError, ValueError, OSError) as e:
        fail(f"primitives {path}: {str(e).splitlines()[0]}")
    if not model.config.path_offsets or model.config.lookahead_source != "reference":
        fail(f"{path} does not read the reference's path (distill --lookahead reference --path-offsets ...): "
             "the reference it is shown cannot steer it")
    return model, meta


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mocap", type=Path, required=True, help="the mocap file with the looped walks and their arcs")
    p.add_argument("--primitives", type=Path, nargs="+", required=True)
    p.add_argument("--snippets", nargs="+", required=True, help="looped walks, each with its two arcs in --mocap")
    p.add_argument("--rate", default="15", help="the arcs' bend in deg/s, as in their names (<walk>-left<rate>)")
    p.add_argument("--commands", nargs="+", default=["hold", "step45", "step-45"],
                   help="heading commands: hold, arc<deg/s>, step<deg>, to<m>at<deg> (benchmarks/npmp_steer_law.py)")
    p.add_argument("--steer", choices=("switch", "rate"), default="switch",
                   help="switch: show the walk or one of its arcs; rate: bend the walk at a chosen yaw rate")
    p.add_argument("--gain", type=float, default=1.0, help="--steer rate: deg/s of yaw rate per degree of error")
    p.add_argument("--slew", type=float, default=15.0, help="--steer rate: the most the rate changes, deg/s per s")
    p.add_argument("--deadband", type=float, default=5.0, help="heading error (deg) within which the straight walk "
                                                               "is shown")
    p.add_argument("--dwell", type=float, default=0.0, help="seconds a reference is read at least before another "
                                                            "(0: the choice may change every step)")
    p.add_argument("--noise", type=float, nargs="+", default=[0.0, 0.03])
    p.add_argument("--seeds", type=int, default=3, help="episodes per noise level above 0")
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "npmp_steer_student.json")
    p.add_argument("--frames", type=Path, help="a folder for one PNG strip per episode (the walker's back camera, a "
                                               "frame every second); measures the chosen episodes again")
    args = p.parse_args(argv)

    import torch

    import envs
    from envs import EnvError
    from agents.config import ConfigError
    from agents.npmp import walk_references
    from envs.mocap.tracking import TIMED_FAMILY
    from pipelines.npmp.evaluate import reference_input
    torch.set_num_threads(1)
    bad = [c for c in args.commands if not COMMAND.fullmatch(c)]
    if (bad or not args.deadband >= 0 or not args.dwell >= 0 or min(args.noise) < 0 or args.seeds < 1
            or not args.gain > 0 or not args.slew > 0):
        fail(f"need commands hold, arc<deg/s>, step<deg> or to<m>at<deg> (got {', '.join(bad) or 'those'}), "
             "--deadband >= 0, --dwell >= 0, --gain > 0, --slew > 0, --noise >= 0 and --seeds >= 1")
    try:
        arc_rate = float(args.rate)
    except ValueError:
        arc_rate = float("nan")
    if not arc_rate > 0:
        fail(f"--rate must be the arcs' positive yaw rate in deg/s, as in their names, got {args.rate}")
    if not args.mocap.is_file():
        fail(f"no such file: {args.mocap}")
    dwell = round(args.dwell / CONTROL_STEP_SECONDS)
    results = resumed_results(args.results, Path(__file__).name, argv, mocap=str(args.mocap))
    controllers = results.setdefault("primitives", {})
    for path in args.primitives:
        model, _ = path_reading_primitives(path)
        walks = controllers.setdefault(str(path), {})
        for walk in args.snippets:
            rows = walks.setdefault(walk, {})
            steering = (f"steer rate, gain {args.gain:g}, slew {args.slew:g}" if args.steer == "rate" else
                        f"deadband {args.deadband:g}" + (f", dwell {args.dwell:g}" if args.dwell else ""))
            keys = {c: f"{c}, rate {args.rate}, {steering}" for c in args.commands}
            todo = [(c, n) for c in args.commands for n in args.noise
                    if args.frames or f"{n:g}" not in rows.get(keys[c], {})]
            if not todo:
                continue
            try:
                references = walk_references(walk, arc_rate, str(args.mocap), next(model.parameters()).device)
                inputs = {side: reference_input(model, r.states, r.root) for side, r in references.items()}
                env = envs.make(f"{TIMED_FAMILY}:{walk}", seed=0, clip_start=True, ref_path=str(args.mocap),
                                **NO_TRACKING_END)
            except (EnvError, ConfigError, ValueError, KeyError, OSError) as e:
                fail(f"{walk}: {str(e).splitlines()[0]}")
            try:
                for command, noise in todo:
                    episodes, acts = [], []
                    for seed in range(args.seeds if noise else 1):
                        acts.append(RateSteeredStudent(model, references, env, command, arc_rate, args.gain,
                                                       args.slew) if args.steer == "rate" else
                                    SteeredStudent(model, inputs, env, command, args.deadband, dwell))
                        strip = Strip() if args.frames else None
                        episodes.append(upright_episode(env, acts[-1], noise, seed, observe=strip))
                        if strip is not None:
                            strip.write(args.frames / f"{str(path).replace('/', '_')}__{walk}__{command}__"
                                                      f"noise{noise:g}__{seed}.png")
                    heading_rows(episodes, command, acts)
                    shown = ({"mean_abs_rate": [round(float(np.mean(np.abs(act.rates))), 2) for act in acts]}
                             if args.steer == "rate" else
                             {"reads": [{side: round(act.reads.count(side) / len(act.reads), 3) for side in SIDES}
                                        for act in acts]})
                    rows.setdefault(keys[command], {})[f"{noise:g}"] = {
                        "of": env.last_step, **shown, **{key: [e[key] for e in episodes] for key in (
                            "steps", "turn_degrees", "commanded_turn_degrees", "median_heading_error_degrees",
                            "travelled_m", "turn_by_second_degrees", "reached_at_step", "closest_to_target_m")}}
                    save_results(args.results, results)   # after every command and noise level
                    print(f"{path}: {walk}: {command}, noise {noise:g}: upright {[e['steps'] for e in episodes]}, "
                          f"turned {[e['turn_degrees'] for e in episodes]} of "
                          f"{[e['commanded_turn_degrees'] for e in episodes]} degrees", flush=True)
            finally:
                env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
