"""Does the simulator treat a motion and its mirror image alike? (issue 13; docs/npmp.md, "Turning by the steps").

The planner walks looped walks turning right at 45 deg/s to their end and falls within 1-1.6 s on every left turn,
including the mirror image of a right turn it walks (same walker, mirrored reference and start). This checks the
physics alone, without the planner: the walker starts on a bent walk's first frame (``--rate``, deg/s, left
positive; turned by the steps, ``envs.mocap.convert.step_turn_qpos``) and, separately, on its mirror image
(``mirror_qpos``), and its position servos are commanded to the reference's next joint angles (the feed-forward
controller; the mirror run gets the mirrored ones) for ``--steps`` control steps of 6 physics steps. A physics that
is left/right symmetric gives trajectories that are mirror images up to rounding, which chaos then grows; the report
is, after each listed step, the largest joint-angle difference (rad) of the legs, of the arms and of the rest (spine,
neck, head), and the root position difference (m), between the first run mirrored and the second, for each
``noslip_iterations`` setting given (dm_control's composer arena sets 5: a sequential projection over the contacts,
whose order is not mirror symmetric; it changes nothing here). Each run starts from a reset simulator, so that no
solver warm start is carried from one run into the next.

Measured 2026-11-29 on looped 07_01 at -45 deg/s: the legs stay mirror images (0.0004 rad after one step, 0.02 after
25; root 1.5 cm), the arms do not (0.064 rad after one step, 0.39 after six). The walker's upper-arm twist joints
(``lhumerusrz``, ``rhumerusrz``) share one range, [-1.1, 1.571] rad, which is not its own mirror image: the clip's left
arm at +1.571 mirrors to -1.571 on the right, 0.47 rad beyond its range. So the simulator is symmetric where the
model is, and the model's arms are not.

    python benchmarks/mirror_symmetry.py --clip 07_01 --rate -45 --noslip 5 0
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import mujoco
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.runs import fail  # noqa: E402

PHYSICS_STEPS_PER_CONTROL = 6
REPORTED_STEPS = (1, 3, 6, 11, 16, 21, 25)


def feed_forward_run(kinematics, reference: np.ndarray, steps: int, dt: float) -> np.ndarray:
    """The walker's qpos after each of ``steps`` control steps from the reference's first frame (and velocity), its
    servos commanded to the reference's next joint angles."""
    physics = kinematics.physics
    model = physics.model
    names = [model.id2name(j, "joint") or "" for j in range(model.njnt)]
    joint_of = {next(j for j, name in enumerate(names) if name.split("/")[-1] == wanted): i
                for i, wanted in enumerate(kinematics.joint_names)}
    mujoco.mj_resetData(model.ptr, physics.data.ptr)   # no solver warm start or control left from another run
    kinematics.set_state(reference[0], kinematics.differentiate(reference[:3], dt)[0])
    out = []
    for t in range(steps):
        for a in range(model.nu):
            # a position servo: force = gain * ctrl + bias0 + bias1 * q, so the target q* needs
            # ctrl = (-bias1 q* - bias0) / gain
            target = reference[t + 1, 7 + joint_of[model.actuator_trnid[a, 0]]]
            gain, (bias0, bias1) = model.actuator_gainprm[a, 0], model.actuator_biasprm[a, :2]
            physics.data.ctrl[a] = np.clip((-bias1 * target - bias0) / gain, *model.actuator_ctrlrange[a])
        for _ in range(PHYSICS_STEPS_PER_CONTROL):
            mujoco.mj_step(model.ptr, physics.data.ptr)
        out.append(physics.data.qpos[kinematics._qpos_index].copy())
    return np.array(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clip", default="07_01", help="a shipped CMU clip (data/mocap/cmu), looped to cover --steps")
    p.add_argument("--rate", type=float, default=-45.0, help="the bend, deg/s (left positive)")
    p.add_argument("--steps", type=int, default=25, help="control steps (0.03 s)")
    p.add_argument("--noslip", type=int, nargs="+", default=[5, 0], help="noslip_iterations settings to compare")
    args = p.parse_args(argv)
    from envs.mocap.convert import (SOURCE_DIR, ConversionError, Converter, find_stride, loop_qpos, mirror_qpos,
                                    step_turn_qpos)

    if not 1 <= args.steps <= 300 or not math.isfinite(args.rate) or min(args.noslip) < 0:
        fail("need 1 <= --steps <= 300, a finite --rate and --noslip >= 0")
    converter = Converter()
    kinematics, dt = converter.kinematics, converter.timestep
    try:
        clip, _ = converter.walker_qpos(SOURCE_DIR / f"{args.clip}.amc")
    except ConversionError as e:
        fail(str(e))
    walk = loop_qpos(clip, *find_stride(clip, dt)[:2], max(len(clip), args.steps + 3))
    bent = step_turn_qpos(walk, math.radians(args.rate), kinematics, dt)[:args.steps + 3]
    mirrored = converter.limit_joints(mirror_qpos(bent, kinematics))
    shown = [s for s in REPORTED_STEPS if s <= args.steps]
    print(f"{args.clip} looped, turned by the steps at {args.rate:g} deg/s, and its mirror image; feed-forward servos")
    parts = {"legs": ("femur", "tibia", "foot", "toes"),
             "arms": ("clavicle", "humerus", "radius", "wrist", "hand", "finger", "thumb")}
    groups = {name: [i for i, joint in enumerate(kinematics.joint_names) if any(key in joint for key in keys)]
              for name, keys in parts.items()}
    groups["rest"] = [i for i in range(len(kinematics.joint_names)) if not any(i in g for g in groups.values())]
    print("| noslip_iterations | " + " | ".join(f"step {s}: legs / arms / rest (rad), root (m)" for s in shown) + " |")
    print("|---|" + "---|" * len(shown))
    for noslip in args.noslip:
        kinematics.physics.model.opt.noslip_iterations = noslip
        first, second = (feed_forward_run(kinematics, ref, args.steps, dt) for ref in (bent, mirrored))
        first_mirrored = converter.limit_joints(mirror_qpos(np.concatenate([bent[:1], first]), kinematics))[1:]
        difference = np.abs(first_mirrored[:, 7:] - second[:, 7:])
        joints = {name: difference[:, columns].max(axis=1) for name, columns in groups.items()}
        root = np.linalg.norm(first_mirrored[:, :3] - second[:, :3], axis=1)
        print(f"| {noslip} | " + " | ".join(" / ".join(f"{joints[g][s - 1]:.4f}" for g in ("legs", "arms", "rest"))
                                          + f", {root[s - 1]:.4f}" for s in shown) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
