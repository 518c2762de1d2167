"""Why the experts earn almost none of the CoMic reward's joint-velocity term (issue 13; docs/npmp.md, "Expert
quality"): the term is exp(-0.1 E), E the sum over the 56 joints of the squared error of the joint angular velocity
(rad/s), and carries 0.5 of the 1.45 a perfect tracker earns per step. The issue's target (median relative return
>= 0.7, i.e. 1.015 per step) cannot be met without it: a perfect pose tracker that earns none of it gets 0.95.

Reads the planner's runs stored in an LQR collection (``collect --expert-policy lqr``: ``plan/physics_states``, the
full simulator state at every control step) and the clip's reference, and reports per snippet, over the run's steps
(medians):
- ``E`` and ``velocity_term`` = exp(-0.1 E): what the walker earned;
- ``jitter``: E between the walker's joint velocity and the central difference of its own joint angles over one
  control step -- the part no smoother motion of the same pose could remove;
- ``motion``: E between that central difference and the reference's joint velocities (themselves the central
  differences of the reference's angles) -- how differently the joints move;
- ``lagged``: the mean E with the walker's state taken 0-3 control steps later than the reference's frame (the
  servos' lag), and ``joints``: the joint groups with the largest mean squared error.

    python benchmarks/velocity_term.py --data runs/npmp/periodic/two200q.h5 --mocap runs/npmp/loops/mocap.h5
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.mpc import JOINTS_VELOCITY_SCALE  # noqa: E402
from benchmarks.runs import fail, write_json  # noqa: E402

CONTROL_TIMESTEP = 0.03
LAGS = (0, 1, 2, 3)
GROUPS = {"knees": ("tibiarx",), "ankles": ("footrz", "footrx"), "toes": ("toesrx",),
          "hips": ("femurrz", "femurry", "femurrx"), "spine and neck": ("lowerback", "upperback", "thorax",
                                                                       "lowerneck", "upperneck", "head"),
          "arms": ("clavicle", "humerus", "radius", "wrist", "hand", "fingers", "thumb")}


def joint_layout():
    """(names, qpos columns, qvel columns) of the walker's mocap joints in the stored full physics state (time,
    qpos, qvel, act: mjSTATE_FULLPHYSICS)."""
    from dm_control import mjcf
    from dm_control.locomotion.arenas import floors
    from dm_control.locomotion.walkers import cmu_humanoid

    walker, arena = cmu_humanoid.CMUHumanoidPositionControlledV2020(), floors.Floor()
    arena.add_free_entity(walker)   # the free joint comes first in the state, as in the tracking task
    physics = mjcf.Physics.from_mjcf_model(arena.mjcf_model)
    joints = physics.bind(walker.mocap_joints)
    return ([j.name for j in walker.mocap_joints], 1 + np.asarray(joints.qposadr).ravel(),
            1 + physics.model.nq + np.asarray(joints.dofadr).ravel())


def velocity_errors(states: np.ndarray, reference_angles: np.ndarray, reference_velocities: np.ndarray,
                    qpos: np.ndarray, qvel: np.ndarray, names: list[str]) -> dict:
    """The module docstring's numbers for one run: ``states`` [T+1, full state] from the clip's first frame,
    the reference's joint angles and velocities [frames, joints]."""
    n = min(len(states), len(reference_angles))
    angles, velocities = states[:n, qpos], states[:n, qvel]
    reference_velocities = reference_velocities[:n]
    own = (angles[2:] - angles[:-2]) / (2 * CONTROL_TIMESTEP)   # central differences, steps 1 .. n-2
    squared = (velocities - reference_velocities) ** 2
    error = squared.sum(1)
    lagged = {lag: float(((velocities[1 + lag:n - 1] - reference_velocities[1:n - 1 - lag]) ** 2).sum(1).mean())
              for lag in LAGS if n - 1 - lag > 1}
    per_joint = squared.mean(0)
    groups = {group: float(sum(per_joint[i] for i, name in enumerate(names) if name.endswith(suffixes)))
              for group, suffixes in GROUPS.items()}
    return {"steps": n, "E": float(np.median(error)),
            "velocity_term": float(np.median(np.exp(-JOINTS_VELOCITY_SCALE * error))),
            "jitter": float(np.median(((velocities[1:-1] - own) ** 2).sum(1))),
            "motion": float(np.median(((own - reference_velocities[1:-1]) ** 2).sum(1))),
            "lagged": lagged, "joints": dict(sorted(groups.items(), key=lambda kv: -kv[1]))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="an LQR collection holding the planner's runs")
    parser.add_argument("--mocap", type=Path, default=None,
                        help="the mocap file of the snippets (default: each snippet's own, as recorded in the data)")
    parser.add_argument("--snippets", nargs="+", default=None, help="default: every snippet with a stored run")
    parser.add_argument("--results", type=Path, default=None, help="also write the numbers here (JSON)")
    args = parser.parse_args(argv)

    from envs.mocap.convert import DEFAULT_OUTPUT

    if not args.data.is_file():
        fail(f"no data file {args.data}")
    names, qpos, qvel = joint_layout()
    rows = {}
    with h5py.File(args.data, "r") as data:
        runs = [s for s in data if isinstance(data[s], h5py.Group) and "plan" in data[s]]
        for snippet in args.snippets or runs:
            if snippet not in runs:
                fail(f"{args.data} holds no planner run of {snippet} (it has runs of {', '.join(runs) or 'none'})")
            group = data[snippet]
            mocap = args.mocap or Path(group.attrs.get("mocap") or DEFAULT_OUTPUT)
            try:
                with h5py.File(mocap, "r") as reference:
                    walker = reference[snippet]["walkers/walker_0"]
                    angles, velocities = walker["joints"][()].T, walker["joints_velocity"][()].T
            except (OSError, KeyError) as e:
                fail(f"cannot read {snippet}'s reference from {mocap}: {e}")
            row = velocity_errors(group["plan/physics_states"][()], angles, velocities, qpos, qvel, names)
            rows[snippet] = row
            lagged = ", ".join(f"{lag}: {e:.0f}" for lag, e in row["lagged"].items())
            worst = ", ".join(f"{g} {e:.1f}" for g, e in list(row["joints"].items())[:3])
            print(f"{snippet} ({row['steps']} steps): E {row['E']:.0f} (velocity term {row['velocity_term']:.2g}); "
                  f"jitter {row['jitter']:.0f}, motion {row['motion']:.0f}; mean E by lag {lagged}; worst {worst}")
    if args.results:
        write_json(args.results, {"data": str(args.data), "snippets": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
