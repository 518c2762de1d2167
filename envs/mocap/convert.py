"""CMU AMC clips -> dm_control mocap HDF5 for the ``CMUHumanoidPositionControlledV2020`` walker (seed 000 §8.1).

Pipeline (``python -m envs.mocap.convert --mirror --curve 30 --curve-clips 02_01 07_01 07_02 07_03 07_05 07_06 07_09
07_11 08_01 08_02 08_04 08_05 08_07 08_11`` regenerates ``data/mocap/cmu_snippets.h5`` from ``data/mocap/cmu/``):

1. ``dm_control.suite.utils.parse_amc.convert`` turns the 120 Hz AMC frames into ``humanoid_CMU`` qpos and
   resamples them (cubic splines) to the control timestep ``CONTROL_TIMESTEP`` = 0.03 s, the timestep of
   dm_control's CMU-2020 tracking data (``MultiClipMocapTracking`` takes its control timestep from the clip's
   ``dt``). The root quaternion is renormalised after the per-component spline.
2. Walker qpos: the 56 hinge angles are mapped BY NAME from ``humanoid_CMU``'s joint order to the walker's
   ``mocap_joints`` order, wrapped to [-pi, pi) and clipped to the walker's joint ranges (about 6 % of samples lie
   outside them, e.g. a wrapped thumb angle in 08_01; the walker cannot reach them and starting there would make
   the joint limits kick). The V2020 walker is ``humanoid_CMU``'s skeleton scaled up (dm_control rescales it by
   1.2; its 2020 legs come out 1.215 times as long), so the root translation is scaled by ``body_scale``, the
   ratio of the two models' hip-to-ankle lengths (measured, not assumed), to keep stance feet from sliding.
3. Floor, per clip: parse_amc does no height retargeting, so the feet float or sink by a subject-dependent
   amount (``data/mocap/cmu/SOURCES.md``, column "foot p10", measured on ``humanoid_CMU``), and on the walks the
   capture floor also rises 1-2 cm per metre travelled. We measure the same statistic on the walker -- the
   10th percentile over frames of the lowest foot/toe geom-to-floor distance -- about a fitted floor plane
   (``Converter.floor_plane``) and subtract the plane from the root height, so stance feet touch z = 0 along
   the whole clip.
4. Snippets (§8.1): clips longer than ``MAX_SNIPPET_SECONDS`` = 6 s are cut into the fewest equal consecutive
   pieces of at most 6 s (each is then over 3 s); shorter clips (some runs are 1.1 s) stay whole.
5. Mirroring (§8.2, data augmentation by bilateral symmetry), ``mirror_qpos``: the world is reflected in the
   vertical plane through the snippet's first root position that is perpendicular to the root's horizontal
   left-right axis in the first frame (M_w = I - 2 n n^T), and the body in its own sagittal plane (M_b, the
   reflection whose normal is the root's local left-right axis, found from the hips). So the mirrored snippet
   starts where and facing the way the original does. Root position p -> p_0 + M_w (p - p_0); root rotation
   R -> M_w R M_b; each joint's angle moves to its left/right partner (names ``l...``/``r...``, e.g.
   ``lfemurrz``<->``rfemurrz``; central joints are their own partner) and is negated when the partner's axis is
   the mirror image of the joint's axis (rotation about a mirrored axis reverses) and kept when it is minus the
   mirror image. Those signs come from the model's joint axes in its zero pose, which is left/right symmetric.
   Velocities and all derived quantities are recomputed from the mirrored qpos. A mirrored clip that turns left
   turns right.
5b. Curving (``--curve RATE``, not the seed's: data augmentation for steering; off by default): every walk and run
   of the shipped clips goes straight (their paths turn by at most 6 degrees), so primitives distilled from them have
   no walk-and-turn skill to steer to a target with. ``curve_qpos`` bends a snippet's path at a constant yaw rate
   omega: the root's rotation at frame t is turned about the vertical by omega t dt and each horizontal step of the
   root is turned by the same angle (the path becomes an arc; heights and joint angles are unchanged). The stance
   foot then pivots about the root by omega dt per frame (at 30 deg/s and a foot 0.3 m from the root, 0.16 m/s of
   slip, less than the subject-9 runs' own), which a physics-based tracker has to absorb. Ids
   ``<snippet-id>-left<RATE>`` (counter-clockwise seen from above) and ``-right<RATE>``; the shipped file has the
   walks at 30 deg/s (the regeneration command at the top). They are named like any snippet but left out of the default
   sets (``tracking.snippet_ids``, the multi-clip task, the expert benchmark), which stay the clips as captured.
5c. Looping (``--loop SECONDS``, not the seed's: walks longer than the clips; off by default): the walks last 2.6-4.8 s,
   and primitives distilled from them have never walked on for longer. ``find_stride`` finds the snippet's most
   nearly repeating stretch of 0.5-2 s -- for a walk a stride, two steps -- as the frame pair (start, end) whose
   joint angles, joint velocities, root height and root pitch/roll differ least (``stride_mismatch``; 0.05-0.10 on
   the shipped walks: a few hundredths of a radian per joint). ``loop_qpos`` closes the stride (joint angles, height
   and pitch/roll shifted linearly over it by the fraction of frame end's mismatch, so its last frame leads into its
   first as it led into frame end) and repeats it after the snippet's first ``start`` frames until the snippet lasts
   SECONDS, each copy carried on from where the last ended: turned about the vertical by the stride's own change of
   heading and moved by its travel. Ids ``<snippet-id>-loop<SECONDS>`` (and ``<snippet-id>-mirror-loop<SECONDS>``
   with ``--mirror``; with ``--curve`` the loops are bent too, ``-loop<SECONDS>-left<RATE>``); like the curved ones
   they are left out of the default sets.
5d. Bending for a while (``--curve-window START END`` with ``--curve``, not the seed's: a walk that takes a bend and
   leaves it): also writes each bent snippet that lasts past END bent only between START and END seconds, straight
   before and after (the heading then holds the turn it reached). A student of the constant arcs has never seen
   its reference begin or end a turn mid-walk, which is what steering asks of it. Ids ``-left<RATE>from<START>to<END>``
   and ``-right...``; shorter snippets get no such variant (they would equal the straight one).
5e. Turning by the steps (``--curve-style stepped`` with ``--curve``, not the seed's): 5b pivots the whole clip
   about the root, so the stance foot twists on the floor at the yaw rate and slides (at 45 deg/s on looped 07_01,
   the stance foot turns 44-52 deg/s and slides 0.20-0.25 m/s, against the clip's own 13 deg/s and 0.15 m/s), which
   no walker with friction under its feet can do. ``step_turn_qpos`` turns the heading at the same rate but keeps
   each stance foot's heading and motion on the floor as in the clip, the hips' axial joints (``lfemurry``,
   ``rfemurry``: about the thigh's long axis) taking up the difference (at 45 deg/s, up to 12 deg either way), and
   the root's path is where the planted feet carry it: the turn is taken a step at a time, as people turn. Ids
   ``-stepleft<RATE>`` and ``-stepright<RATE>`` (with ``--curve-window``, ``-stepleft<RATE>from<START>to<END>``).
6. Derived quantities: for each frame the walker's qpos and qvel are set in MuJoCo and dm_control's own
   ``reference_pose.utils.get_features`` reads centre of mass, end effectors, appendages, body positions and
   quaternions -- the same function the tracking task applies to the simulated walker, so the reference and the
   walker features are the same quantities. qvel = mj_differentiatePos central differences (one-sided at the ends),
   i.e. MuJoCo's convention (root linear velocity in the world frame, angular velocity in the root frame), which
   is how the task writes them back into the free joint.

HDF5 schema (that of dm_control's ``locomotion/mocap/test_trajectories.h5``, read by ``HDF5TrajectoryLoader``):
one group per snippet with attrs ``num_steps``, ``dt``; ``walkers/walker_0`` with attrs ``name``, ``model``
(``CMU_2020``), ``mass`` (0: no mass rescaling), ``end_effector_names``, ``appendage_names``, empty ``scaling``
and ``markers`` groups, and one float32 dataset of shape (size, num_steps) per ``mocap_pb2.WalkerPose`` field:
position 3, quaternion 4, joints 56, center_of_mass 3, end_effectors 12, velocity 3, angular_velocity 3,
joints_velocity 56, appendages 15, body_positions 93, body_quaternions 124; an empty ``props`` group. The file's
attrs record the conversion settings and each snippet's source clip and frame range.
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import re
import tempfile
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import h5py  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SOURCE_DIR = REPO / "data" / "mocap" / "cmu"
CLIP_PATTERNS = ("*.amc", "*.bvh")   # AMC clips, and BVH clips of the CMU release (envs/mocap/bvh.py)
DEFAULT_OUTPUT = REPO / "data" / "mocap" / "cmu_snippets.h5"
CONTROL_TIMESTEP = 0.03
MAX_SNIPPET_SECONDS = 6.0
MIN_STRIDE_SECONDS, MAX_STRIDE_SECONDS = 0.5, 2.0   # a walking stride (two steps) lasts about 1-1.2 s, a run's 0.7
FLOOR_PERCENTILE = 10.0
MIN_SLOPE_SPAN = 1.0
FOOT_BODIES = ("lfoot", "ltoes", "rfoot", "rtoes")
SINGLE_STANCE_CLEARANCE = 0.05   # a foot is the stance foot when it is this much lower than the other (metres)
MIN_STANCE_FRAMES = 3            # shorter runs of one foot lower are double support's flicker, not a step (90 ms)
HIP_AXIAL_JOINTS = ("lfemurry", "rfemurry")   # about the thigh's long axis: turns the foot about the vertical
AIRBORNE_CLEARANCE = 0.08        # no foot within this of the floor: in flight (a run), or a reference no walker can follow
LEG_BODIES = ("lfemur", "lfoot")
POSE_FIELDS = ("position", "quaternion", "joints", "center_of_mass", "end_effectors", "velocity",
               "angular_velocity", "joints_velocity", "appendages", "body_positions", "body_quaternions")


class ConversionError(ValueError):
    """A clip cannot be converted (missing file, unknown joint, bad settings)."""


def amc_to_cmu_qpos(amc_path: Path, timestep: float = CONTROL_TIMESTEP) -> tuple[np.ndarray, list[str]]:
    """The clip as ``humanoid_CMU`` qpos, shape (frames, 63), resampled to ``timestep``; and the hinge names. A
    ``.bvh`` path (the CMU BVH release) is first converted back to AMC (``envs.mocap.bvh``)."""
    from dm_control.suite import humanoid_CMU
    from dm_control.suite.utils import parse_amc

    from envs.mocap.bvh import BVHError, bvh_to_amc

    amc_path = Path(amc_path)
    if not amc_path.is_file():
        raise ConversionError(f"no clip file at {amc_path}")
    physics = humanoid_CMU.Physics.from_xml_string(*humanoid_CMU.get_model_and_assets())
    with tempfile.TemporaryDirectory() as folder:
        if amc_path.suffix == ".bvh":                    # parse_amc reads a file: the AMC text goes to one
            try:
                text, _ = bvh_to_amc(amc_path)
            except BVHError as e:
                raise ConversionError(str(e)) from None
            amc_path = Path(folder) / f"{amc_path.stem}.amc"
            amc_path.write_text(text)
        qpos = parse_amc.convert(str(amc_path), physics, timestep).qpos.T.copy()
    qpos[:, 3:7] /= np.linalg.norm(qpos[:, 3:7], axis=1, keepdims=True)
    names = [n for n in physics.named.data.qpos.axes.row.names if n != "root"]
    return qpos, names


def clip_path(source_dir: Path, clip: str) -> Path:
    """``<clip>.amc`` in ``source_dir``, else ``<clip>.bvh``; a missing clip names the AMC it looked for."""
    amc = Path(source_dir) / f"{clip}.amc"
    bvh = amc.with_suffix(".bvh")
    return bvh if not amc.is_file() and bvh.is_file() else amc


def map_joints(values: np.ndarray, source_names: list[str], target_names: list[str]) -> np.ndarray:
    """Columns of ``values`` (named ``source_names``) reordered to ``target_names``."""
    missing = sorted(set(target_names) - set(source_names))
    if missing:
        raise ConversionError(f"source has no joint(s) {', '.join(missing)}")
    index = {name: i for i, name in enumerate(source_names)}
    return values[:, [index[name] for name in target_names]]


def _partner(name: str, names: list[str]) -> str:
    """The left/right partner of a joint or body name (itself for central parts such as ``lowerback``)."""
    swapped = {"l": "r", "r": "l"}.get(name[:1], "") + name[1:]
    return swapped if swapped in names else name


class WalkerKinematics:
    """The V2020 walker on a flat floor, used only kinematically (set qpos/qvel, read features)."""

    def __init__(self):
        from dm_control import mjcf
        from dm_control.locomotion.arenas import floors
        from dm_control.locomotion.walkers import cmu_humanoid

        self.walker = cmu_humanoid.CMUHumanoidPositionControlledV2020()
        arena = floors.Floor()
        self.walker.create_root_joints(arena.attach(self.walker))
        self.physics = mjcf.Physics.from_mjcf_model(arena.mjcf_model)
        self.joint_names = [j.name for j in self.walker.mocap_joints]
        self._joints = self.physics.bind(self.walker.mocap_joints)
        self.joint_range = np.array(self._joints.range)
        free = self.physics.bind(mjcf.get_attachment_frame(self.walker.mjcf_model).freejoint)
        self._qpos_index = np.concatenate([free.qposadr + np.arange(7), self._joints.qposadr])
        self._qvel_index = np.concatenate([free.dofadr + np.arange(6), self._joints.dofadr])
        self._foot_geoms = [g for b in FOOT_BODIES
                            for g in self.walker.mjcf_model.find("body", b).find_all("geom")]
        self._side_geoms = {side: [g for b in FOOT_BODIES if b[0] == side
                                   for g in self.walker.mjcf_model.find("body", b).find_all("geom")] for side in "lr"}
        self._ankles = [self.physics.bind(self.walker.mjcf_model.find("body", f"{side}foot")) for side in "lr"]
        self._floor_geom = self.physics.bind(arena.ground_geoms[0]).element_id
        self._mirror_setup()

    # -- state ---------------------------------------------------------------------------------------------------
    def set_state(self, qpos: np.ndarray, qvel: np.ndarray | None = None) -> None:
        """Set the walker's qpos (7 root + joints in ``joint_names`` order) and qvel, and run forward."""
        self.physics.data.qpos[self._qpos_index] = qpos
        self.physics.data.qvel[self._qvel_index] = 0.0 if qvel is None else qvel
        self.physics.forward()

    def features(self) -> dict[str, np.ndarray]:
        from dm_control.locomotion.tasks.reference_pose import utils

        return utils.get_features(self.physics, self.walker)

    def lowest_foot_distance(self) -> float:
        """Signed distance from the feet/toes to the floor (negative: penetration), after ``set_state``."""
        return self._lowest_point(self._foot_geoms)[0]

    def _lowest_point(self, geoms: list) -> tuple[float, int, np.ndarray]:
        """(distance to the floor, body id, nearest point in the world) of the lowest of ``geoms``."""
        m, d = self.physics.model.ptr, self.physics.data.ptr
        best = (np.inf, -1, np.zeros(3))
        for geom in geoms:
            geom_id, fromto = self.physics.bind(geom).element_id, np.zeros(6)
            distance = mujoco.mj_geomDistance(m, d, geom_id, self._floor_geom, 1.0, fromto)
            if distance < best[0]:
                best = (distance, int(m.geom_bodyid[geom_id]), fromto[:3].copy())
        return best

    def stance_slip(self, qpos: np.ndarray, dt: float) -> np.ndarray:
        """How fast the reference's stance foot slides, on its single-stance frames: the horizontal velocity, along
        the root's direction of travel, of the foot's material point nearest the floor (central differences of that
        point carried with its body). A physical walker's stance foot does not slide, so a reference whose stance
        foot moves forward runs ahead of any tracker by about this speed (a root translation scaled too much for
        the subject's legs; backward: too little). Rolling over the heel or toes moves the contact point but not
        the material point, so it reads ~0. Frames: those where one foot is ``SINGLE_STANCE_CLEARANCE`` lower than
        the other (none in a clip that never stands on one foot); returns m/s, one value per such frame."""
        sides, data, slips = self._side_geoms, self.physics.data, []
        for t in range(1, len(qpos) - 1):
            self.set_state(qpos[t])
            (low, body, point), (other, _, _) = sorted((self._lowest_point(g) for g in sides.values()),
                                                          key=lambda lowest: lowest[0])
            travel = qpos[t + 1, :2] - qpos[t - 1, :2]
            if other - low < SINGLE_STANCE_CLEARANCE or np.linalg.norm(travel) < 1e-6:
                continue
            local = data.xmat[body].reshape(3, 3).T @ (point - data.xpos[body])
            moved = []
            for frame in (qpos[t - 1], qpos[t + 1]):
                self.set_state(frame)
                moved.append(data.xpos[body] + data.xmat[body].reshape(3, 3) @ local)
            slips.append(float((moved[1] - moved[0])[:2] @ travel / np.linalg.norm(travel) / (2 * dt)))
        return np.array(slips)

    def stance_sides(self, qpos: np.ndarray) -> np.ndarray:
        """Per frame, which foot carries the walker: 0 (left) or 1 (right), the one whose foot or toes are lower to
        the floor. A walk alternates them every step; runs shorter than ``MIN_STANCE_FRAMES`` (the flicker of double
        support, where both feet are down) take their neighbours' side."""
        lower = []
        for frame in qpos:
            self.set_state(frame)
            left, right = (self._lowest_point(self._side_geoms[side])[0] for side in "lr")
            lower.append(int(right < left))
        lower = np.array(lower)
        while True:
            bounds = np.concatenate([[0], np.flatnonzero(np.diff(lower)) + 1, [len(lower)]])
            short = [(a, b) for a, b in zip(bounds[:-1], bounds[1:])
                     if b - a < MIN_STANCE_FRAMES and 0 < a and b < len(lower)]
            if not short:
                return lower
            a, b = short[0]
            lower[a:b] = lower[a - 1]

    def ankles_xy(self, qpos: np.ndarray) -> np.ndarray:
        """The left and right ankle (foot body) positions in the plane, shape (frames, 2, 2)."""
        out = np.zeros((len(qpos), 2, 2))
        for t, frame in enumerate(qpos):
            self.set_state(frame)
            out[t] = [ankle.xpos[:2] for ankle in self._ankles]
        return out

    def stance_twist(self, qpos: np.ndarray, dt: float) -> np.ndarray:
        """How fast the stance foot turns about the vertical (rad/s, absolute), on the frames inside a stance
        (``stance_sides``): central differences of the foot body's heading. A walker's planted foot does not twist,
        so a reference's twist is a turn it cannot copy with its feet (5e)."""
        stance = self.stance_sides(qpos)
        headings = np.zeros((len(qpos), 2))
        for t, frame in enumerate(qpos):
            self.set_state(frame)
            headings[t] = [math.atan2(ankle.xmat[3], ankle.xmat[0]) for ankle in self._ankles]
        headings = np.unwrap(headings, axis=0)
        inside = [t for t in range(1, len(qpos) - 1) if stance[t - 1] == stance[t] == stance[t + 1]]
        return np.array([abs(headings[t + 1, stance[t]] - headings[t - 1, stance[t]]) / (2 * dt) for t in inside])

    def zero_pose(self) -> np.ndarray:
        """Root 1 m up with identity rotation, all joints at 0 (the model's left/right symmetric pose)."""
        return np.concatenate([[0, 0, 1, 1, 0, 0, 0], np.zeros(len(self.joint_names))])

    def leg_length(self) -> float:
        """Hip (femur body) to ankle (foot body) distance in the zero pose."""
        self.set_state(self.zero_pose())
        hip, ankle = (self.walker.mjcf_model.find("body", b) for b in LEG_BODIES)
        return float(np.linalg.norm(self.physics.bind(hip).xpos - self.physics.bind(ankle).xpos))

    def differentiate(self, qpos: np.ndarray, dt: float) -> np.ndarray:
        """qvel by central differences of ``qpos`` (frames, 7 + joints) with MuJoCo's position difference."""
        model = self.physics.model.ptr
        full = np.tile(self.physics.data.qpos.copy(), (len(qpos), 1))
        full[:, self._qpos_index] = qpos
        qvel = np.zeros((len(qpos), self.physics.model.nv))
        for t in range(len(qpos)):
            before, after = max(t - 1, 0), min(t + 1, len(qpos) - 1)
            mujoco.mj_differentiatePos(model, qvel[t], (after - before) * dt, full[before], full[after])
        return qvel[:, self._qvel_index]

    # -- mirroring -----------------------------------------------------------------------------------------------
    def _mirror_setup(self) -> None:
        self.set_state(self.zero_pose())
        bind_body = lambda name: self.physics.bind(self.walker.mjcf_model.find("body", name))  # noqa: E731
        lateral = bind_body("lfemur").xpos - bind_body("rfemur").xpos   # root frame = world frame here
        axis = int(np.argmax(np.abs(lateral)))
        if abs(lateral[axis]) < 0.9 * np.linalg.norm(lateral):
            raise ConversionError("the walker's hips are not aligned with a root axis; cannot mirror")
        self.body_mirror = np.eye(3)
        self.body_mirror[axis, axis] = -1.0
        axes = {name: np.array(self.physics.bind(j).xaxis) for name, j in
                zip(self.joint_names, self.walker.mocap_joints)}
        self.mirror_index = np.array([self.joint_names.index(_partner(n, self.joint_names))
                                      for n in self.joint_names])
        signs = []
        for name in self.joint_names:
            alignment = float(axes[_partner(name, self.joint_names)] @ (self.body_mirror @ axes[name]))
            if abs(alignment) < 0.9:
                raise ConversionError(f"joint {name} has no mirror-symmetric partner axis ({alignment:.2f})")
            signs.append(-np.sign(alignment))
        self.mirror_sign = np.array(signs)


def wrap_angle(angle):
    """Angles (radians) wrapped to [-pi, pi)."""
    return (angle + np.pi) % (2 * np.pi) - np.pi


def _rotation(quat: np.ndarray) -> np.ndarray:
    matrix = np.zeros(9)
    mujoco.mju_quat2Mat(matrix, np.asarray(quat, np.float64))
    return matrix.reshape(3, 3)


def yaw(quaternion) -> float:
    """The heading (radians, counter-clockwise from +x) of a body with this (w, x, y, z) orientation: where its x axis
    points in the plane."""
    w, x, y, z = quaternion
    return math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def mirror_qpos(qpos: np.ndarray, kinematics: WalkerKinematics) -> np.ndarray:
    """The left/right mirror image of a walker qpos trajectory (frames, 7 + joints); see the module docstring."""
    lateral = _rotation(qpos[0, 3:7]) @ np.diag(kinematics.body_mirror < 0).astype(float)
    normal = np.array([*lateral[:2], 0.0]) / np.linalg.norm(lateral[:2])   # body's left-right axis, horizontal
    world_mirror = np.eye(3) - 2.0 * np.outer(normal, normal)
    origin = np.array([*qpos[0, :2], 0.0])
    out = np.array(qpos, dtype=np.float64, copy=True)
    out[:, :3] = origin + (qpos[:, :3] - origin) @ world_mirror.T
    for t in range(len(qpos)):
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, (world_mirror @ _rotation(qpos[t, 3:7]) @ kinematics.body_mirror).ravel())
        out[t, 3:7] = quat if quat[0] * qpos[t, 3] >= 0 else -quat   # keep w's sign: mirroring twice = identity
    out[:, 7:][:, kinematics.mirror_index] = qpos[:, 7:] * kinematics.mirror_sign
    return out


def snippet_qpos(ref_path: Path, snippet: str) -> np.ndarray:
    """The walker qpos (frames, 7 + joints) of ``snippet`` in a mocap file this module wrote."""
    with h5py.File(ref_path, "r") as f:
        if snippet not in f:
            raise ConversionError(f"no snippet {snippet!r} in {ref_path}")
        walker = f[snippet]["walkers"]["walker_0"]
        return np.ascontiguousarray(np.concatenate([np.asarray(walker[field], np.float64).T
                                                    for field in ("position", "quaternion", "joints")], axis=1))


def chain_motion(pieces: list[np.ndarray], velocities: list[np.ndarray],
                 blends: list[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(qpos, qvel) of walker pieces (qpos: frames, 7 + joints; their qvel: frames, 6 + joints) played one after
    the other: each piece turned about the vertical and moved on the floor so that its first frame stands where the
    chain's next frame would have (the last frame's step, in position and heading, repeated). Joint angles, root
    height and tilt are the piece's own: a piece should begin where the one before ends (``pipelines.npmp chain``
    enters each clip at its best match). Velocities are the pieces' own too (the root's world velocity turned with
    its piece), not differences across a join: what a walker sees of each frame is then what it sees of the clip's
    own frame (``priors.npmp.reference.ReferenceChain`` reads the clips' frames).

    ``blends[i]`` (the new piece's share over its lead-in, rising; empty for none): piece i then starts with that
    many lead-in frames, the clip's frames before its entry, moved with the piece; the chain's last frames are
    blended toward them (joint angles, root position and velocities linearly, the root's rotation by slerp), and
    the piece proper follows (``ReferenceChain`` with ``blend``)."""
    if (not pieces or any(len(p) < 2 for p in pieces[1:]) or not len(pieces[0])
            or [len(p) for p in pieces] != [len(v) for v in velocities]):
        raise ConversionError("a chain needs a first piece and further pieces of at least 2 frames each, each with "
                              "its velocities")
    blends = [np.zeros(0)] * len(pieces) if blends is None else [np.asarray(b, np.float64) for b in blends]
    if len(blends) != len(pieces) or len(blends[0]) or any(len(p) < len(b) + 2 for p, b in zip(pieces, blends)):
        raise ConversionError("one blend per piece, none for the first, each shorter than its piece by 2 frames")
    qpos = np.array(pieces[0], np.float64, order="C", copy=True)
    qvel = np.array(velocities[0], np.float64, copy=True)
    for piece, velocity, share in zip(pieces[1:], velocities[1:], blends[1:]):
        lead = len(share)
        last, before = qpos[-1], qpos[-2] if len(qpos) > 1 else qpos[-1]
        turn_step = wrap_angle(yaw(last[3:7]) - yaw(before[3:7]))
        turn = yaw(last[3:7]) + turn_step - yaw(piece[lead, 3:7])
        rotation = np.array([[math.cos(turn), -math.sin(turn)], [math.sin(turn), math.cos(turn)]])
        piece = np.ascontiguousarray(piece, np.float64)
        moved, moved_velocity = piece.copy(), np.array(velocity, np.float64, copy=True)
        moved[:, :2] = 2 * last[:2] - before[:2] + (piece[:, :2] - piece[lead, :2]) @ rotation.T
        moved_velocity[:, :2] = velocity[:, :2] @ rotation.T   # world linear velocity; the angular one is local
        turn_quat = np.array([math.cos(turn / 2), 0.0, 0.0, math.sin(turn / 2)])
        for t in range(len(moved)):
            mujoco.mju_mulQuat(moved[t, 3:7], turn_quat, piece[t, 3:7])
        if lead:
            qpos = _blend_tail(qpos, moved[:lead], share)
            qvel[-lead:] += share[:, None] * (moved_velocity[:lead] - qvel[-lead:])   # qvel is this function's own
        qpos, qvel = np.concatenate([qpos, moved[lead:]]), np.concatenate([qvel, moved_velocity[lead:]])
    return qpos, qvel


def _blend_tail(qpos: np.ndarray, lead_in: np.ndarray, share: np.ndarray) -> np.ndarray:
    """``qpos`` with its last ``len(share)`` frames blended toward ``lead_in`` by ``share`` (the root's rotation
    turned by that share of the rotation between them: slerp)."""
    qpos = qpos.copy()
    tail = qpos[len(qpos) - len(share):]
    for t, (a, b, w) in enumerate(zip(tail.copy(), lead_in, share)):
        tail[t] = a + w * (b - a)
        rotation = np.zeros(3)
        mujoco.mju_subQuat(rotation, b[3:7], a[3:7])
        quat = a[3:7].copy()
        mujoco.mju_quatIntegrate(quat, rotation, w)
        tail[t, 3:7] = quat
    return qpos


def curve_qpos(qpos: np.ndarray, yaw_rate: float, dt: float = CONTROL_TIMESTEP,
               window: tuple[float, float] | None = None) -> np.ndarray:
    """The snippet qpos (frames, 7 + joints) bent into an arc at ``yaw_rate`` radians per second (counter-clockwise
    seen from above): frame t's root rotation and each root step t -> t+1 are turned about the vertical by
    yaw_rate * t * dt, about the first root position; heights and joint angles are kept (module docstring, 5b).
    ``window`` (start, end) seconds: the path bends only between them, straight before and after (5d)."""
    angles = turn_angles(len(qpos), yaw_rate, dt, window)
    cos, sin = np.cos(angles), np.sin(angles)
    steps = np.diff(qpos[:, :2], axis=0)
    turned = np.stack([cos[:-1] * steps[:, 0] - sin[:-1] * steps[:, 1],
                       sin[:-1] * steps[:, 0] + cos[:-1] * steps[:, 1]], axis=1)
    out = np.array(qpos, dtype=np.float64, copy=True)
    out[1:, :2] = qpos[0, :2] + np.cumsum(turned, axis=0)
    out[:, 3:7] = turn_heading(qpos, angles)
    return out


def turn_heading(qpos: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """The root rotations of ``qpos`` turned about the vertical by ``angles`` (radians, one per frame)."""
    out = np.array(qpos[:, 3:7], dtype=np.float64, copy=True)
    for t, angle in enumerate(angles):
        turn = np.array([np.cos(angle / 2), 0.0, 0.0, np.sin(angle / 2)])
        mujoco.mju_mulQuat(out[t], turn, np.asarray(qpos[t, 3:7], np.float64))
    return out


def turn_angles(frames: int, yaw_rate: float, dt: float, window: tuple[float, float] | None) -> np.ndarray:
    """The heading change at each frame of a bend at ``yaw_rate`` rad/s (only between ``window``'s seconds)."""
    seconds = dt * np.arange(frames)
    if window is not None:
        seconds = np.clip(seconds, *window) - window[0]
    return yaw_rate * seconds


def step_turn_qpos(qpos: np.ndarray, yaw_rate: float, kinematics: WalkerKinematics, dt: float = CONTROL_TIMESTEP,
                   window: tuple[float, float] | None = None) -> np.ndarray:
    """The snippet qpos bent at ``yaw_rate`` rad/s like ``curve_qpos``, but turned by the steps, not pivoted (module
    docstring, 5e): the root's heading turns at the rate, each stance foot keeps one heading and its own motion on
    the floor, and the hips' axial joints take up the difference. A foot holds, through a stance from frame a to b,
    the heading the root has half-way (psi(a) + psi(b)) / 2, so its hip turns from +(psi(b) - psi(a)) / 2 to minus
    that; in the swing the hip's offset moves smoothly (a half cosine) to the next stance's first. The root's
    horizontal path is what follows from the feet: each frame it moves by the change in the stance ankle's offset
    from the root (the edited pose's, from the kinematics) plus the ankle's own displacement in the clip, turned by
    the heading, so a clip's slip is kept and the edit adds none. Rate 0 gives back the clip."""
    angles = turn_angles(len(qpos), yaw_rate, dt, window)
    stance = kinematics.stance_sides(qpos)
    offsets = np.zeros((len(qpos), 2))
    for leg in (0, 1):
        on = np.concatenate([[False], stance == leg, [False]]).astype(int)
        starts, ends = np.flatnonzero(np.diff(on) == 1), np.flatnonzero(np.diff(on) == -1) - 1   # inclusive
        if not len(starts):
            continue
        held = np.full(len(qpos), np.nan)
        for a, b in zip(starts, ends):
            held[a:b + 1] = 0.5 * (angles[a] + angles[b]) - angles[a:b + 1]
        known = np.flatnonzero(~np.isnan(held))
        for a, b in zip(known[:-1], known[1:]):
            if b - a > 1:
                fraction = 0.5 - 0.5 * np.cos(np.pi * (np.arange(a + 1, b) - a) / (b - a))
                held[a + 1:b] = held[a] + fraction * (held[b] - held[a])
        held[:known[0]], held[known[-1] + 1:] = held[known[0]], held[known[-1]]
        offsets[:, leg] = held
    out = np.array(qpos, dtype=np.float64, copy=True)
    for leg, name in enumerate(HIP_AXIAL_JOINTS):
        out[:, 7 + kinematics.joint_names.index(name)] += offsets[:, leg]
    out[:, 3:7] = turn_heading(qpos, angles)
    clip_ankles = kinematics.ankles_xy(qpos)
    at_origin = out.copy()
    at_origin[:, :2] = 0.0
    edited_offsets = kinematics.ankles_xy(at_origin)   # each ankle's horizontal offset from the root
    for t in range(1, len(qpos)):
        leg, cos, sin = stance[t], math.cos(angles[t]), math.sin(angles[t])
        moved = clip_ankles[t, leg] - clip_ankles[t - 1, leg]
        out[t, :2] = (out[t - 1, :2] + edited_offsets[t - 1, leg] - edited_offsets[t, leg]
                      + [cos * moved[0] - sin * moved[1], sin * moved[0] + cos * moved[1]])
    return out


def _tilt(quat: np.ndarray) -> np.ndarray:
    """The rotation matrix with its heading (``yaw``) taken out: the root's pitch and roll."""
    heading = -yaw(quat)
    turn = np.array([[np.cos(heading), -np.sin(heading), 0.0], [np.sin(heading), np.cos(heading), 0.0], [0, 0, 1]])
    return turn @ _rotation(quat)


def _rotation_angle(matrix: np.ndarray) -> float:
    return float(np.arccos(np.clip((np.trace(matrix) - 1.0) / 2.0, -1.0, 1.0)))


def stride_mismatch(qpos: np.ndarray, start: int, end: int, dt: float = CONTROL_TIMESTEP) -> float:
    """How far frame ``end`` is from repeating frame ``start`` once the heading and the horizontal position are set
    aside: RMS joint-angle difference (rad) + the root's pitch/roll difference (rad) + its height difference (m) +
    the RMS joint-velocity difference times ``dt`` (rad per step; so a leg swinging back does not match one swinging
    forward). 0 for a perfectly periodic motion with period end - start."""
    def velocity(t):
        before, after = max(t - 1, 0), min(t + 1, len(qpos) - 1)
        return (qpos[after, 7:] - qpos[before, 7:]) / ((after - before) * dt)
    joints = wrap_angle(qpos[end, 7:] - qpos[start, 7:])
    tilt = _rotation_angle(_tilt(qpos[end, 3:7]) @ _tilt(qpos[start, 3:7]).T)
    speed = velocity(end) - velocity(start)
    return float(np.sqrt(np.mean(joints ** 2)) + tilt + abs(qpos[end, 2] - qpos[start, 2])
                 + dt * np.sqrt(np.mean(speed ** 2)))


def find_stride(qpos: np.ndarray, dt: float = CONTROL_TIMESTEP, min_seconds: float = MIN_STRIDE_SECONDS,
                max_seconds: float = MAX_STRIDE_SECONDS) -> tuple[int, int, float]:
    """The frames [start, end) of the snippet's most nearly repeating stretch (``stride_mismatch`` between its first
    frame and the frame after its last, lowest over every start and every length of ``min_seconds`` to
    ``max_seconds``); returns (start, end, mismatch). For a walk this is a stride: two steps."""
    shortest, longest = max(2, round(min_seconds / dt)), round(max_seconds / dt)
    best = (np.inf, 0, 0)
    for start in range(len(qpos)):
        for end in range(start + shortest, min(start + longest, len(qpos) - 1) + 1):
            best = min(best, (stride_mismatch(qpos, start, end, dt), start, end))
    if not np.isfinite(best[0]):
        raise ConversionError(f"a snippet of {len(qpos)} frames is too short to hold a stride of at least "
                              f"{min_seconds:g} s")
    return best[1], best[2], best[0]


def loop_qpos(qpos: np.ndarray, start: int, end: int, frames: int) -> np.ndarray:
    """The snippet qpos (frames, 7 + joints) made ``frames`` long by repeating its stride [start, end): the frames
    before ``start``, then the stride over and over, each copy carried on from where the last one ended (turned by
    the stride's change of heading about the vertical and moved by its horizontal travel; module docstring, 5c).
    So that the seams do not jump, the stride is first closed: the joint angles, root height and root pitch/roll
    are shifted linearly over the stride by the fraction of frame ``end``'s mismatch with frame ``start`` (at most
    a few hundredths of a radian for a walk), so that its last frame leads into its first as frame end - 1 led into
    frame end."""
    if not 0 <= start < end < len(qpos):
        raise ConversionError(f"a stride needs 0 <= start < end < {len(qpos)} frames, got [{start}, {end})")
    length = end - start
    turn = yaw(qpos[end, 3:7]) - yaw(qpos[start, 3:7])
    cos, sin = math.cos(turn), math.sin(turn)
    carry = np.array([[cos, -sin], [sin, cos]])
    turn_quat = np.array([math.cos(turn / 2), 0.0, 0.0, math.sin(turn / 2)])
    # close the stride: frame end's joints, height and tilt become frame start's (its heading is carried, not closed)
    stride = np.array(qpos[start:end + 1], dtype=np.float64, copy=True)
    fraction = np.arange(length + 1)[:, None] / length
    joint_gap = wrap_angle(qpos[end, 7:] - qpos[start, 7:])
    stride[:, 7:] -= fraction * joint_gap
    stride[:, 2] -= fraction[:, 0] * (qpos[end, 2] - qpos[start, 2])
    target = np.zeros(4)
    mujoco.mju_mulQuat(target, turn_quat, np.asarray(qpos[start, 3:7], np.float64))
    gap, inverse = np.zeros(4), np.zeros(4)
    mujoco.mju_negQuat(inverse, target)
    mujoco.mju_mulQuat(gap, np.asarray(qpos[end, 3:7], np.float64), inverse)   # world-frame rotation, end over target
    gap_vector = np.zeros(3)
    mujoco.mju_quat2Vel(gap_vector, gap, 1.0)
    for t in range(length + 1):
        undo = np.zeros(4)
        mujoco.mju_axisAngle2Quat(undo, gap_vector / (np.linalg.norm(gap_vector) + 1e-12),
                                  -fraction[t, 0] * np.linalg.norm(gap_vector))
        mujoco.mju_mulQuat(stride[t, 3:7], undo, stride[t, 3:7].copy())
    pieces, copy = [np.array(qpos[:start], dtype=np.float64)], stride[:-1]
    while sum(len(p) for p in pieces) < frames:
        pieces.append(copy)
        following = copy.copy()   # the next copy: carried on from where this one ends
        following[:, :2] = qpos[end, :2] + (copy[:, :2] - qpos[start, :2]) @ carry.T
        for t in range(length):
            mujoco.mju_mulQuat(following[t, 3:7], turn_quat, copy[t, 3:7].copy())
        copy = following
    return np.concatenate(pieces)[:frames]


CURVE_STYLES = ("pivot", "stepped")


def curve_suffix(rate: float, window: tuple[float, float] | None = None, style: str = "pivot") -> tuple[str, str]:
    """The id suffixes of the left and right variants at ``rate`` degrees per second (bent only between ``window``'s
    seconds when given: ``-left15from3to7``; turned by the steps, ``step_turn_qpos``: ``-stepleft15``)."""
    bent = f"from{window[0]:g}to{window[1]:g}" if window is not None else ""
    prefix = "step" if style == "stepped" else ""
    return f"-{prefix}left{rate:g}{bent}", f"-{prefix}right{rate:g}{bent}"


CURVED_ID = re.compile(r"-(step)?(left|right)[0-9.]+(from[0-9.]+to[0-9.]+)?$")


def is_curved(snippet_id: str) -> bool:
    """Whether ``snippet_id`` names a curved variant (``curve_suffix``), not a snippet of the clips as captured."""
    return CURVED_ID.search(snippet_id) is not None


def loop_suffix(seconds: float) -> str:
    """The id suffix of a snippet looped to ``seconds`` (``loop_qpos``)."""
    return f"-loop{seconds:g}"


LOOPED_ID = re.compile(r"-loop[0-9.]+(-|$)")


def is_looped(snippet_id: str) -> bool:
    """Whether ``snippet_id`` names a looped variant (``loop_suffix``, maybe curved after looping)."""
    return LOOPED_ID.search(snippet_id) is not None


def is_augmented(snippet_id: str) -> bool:
    """Whether ``snippet_id`` names a made-up variant (curved or looped), not a snippet of the clips as captured
    or its mirror image; the default snippet sets leave these out."""
    return is_curved(snippet_id) or is_looped(snippet_id)


def cut_snippets(num_frames: int, dt: float = CONTROL_TIMESTEP,
                 max_seconds: float = MAX_SNIPPET_SECONDS) -> list[tuple[int, int]]:
    """Frame ranges [start, end) of the fewest equal consecutive pieces no longer than ``max_seconds``."""
    if num_frames < 2:
        raise ConversionError(f"a clip needs at least 2 frames, got {num_frames}")
    max_frames = int(math.floor(max_seconds / dt + 1e-9))
    pieces = math.ceil(num_frames / max_frames)
    bounds = np.linspace(0, num_frames, pieces + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def heading_change(qpos: np.ndarray, kinematics: WalkerKinematics) -> float:
    """Net turn (radians, counter-clockwise positive) of the root's left-right axis from first to last frame."""
    lateral = np.diag(kinematics.body_mirror) < 0
    yaws = []
    for quat in qpos[:, 3:7]:
        axis = _rotation(quat)[:, lateral].ravel()
        yaws.append(math.atan2(axis[1], axis[0]))
    return float(np.unwrap(yaws)[-1] - yaws[0])


class Converter:
    """AMC clips -> walker qpos -> snippet features. One instance holds the walker's physics."""

    def __init__(self, timestep: float = CONTROL_TIMESTEP):
        from dm_control.suite import humanoid_CMU

        self.timestep = timestep
        self.kinematics = WalkerKinematics()
        cmu = humanoid_CMU.Physics.from_xml_string(*humanoid_CMU.get_model_and_assets())
        cmu.data.qpos[3] = 1.0   # zero pose, like WalkerKinematics.leg_length
        cmu.forward()
        cmu_leg = np.linalg.norm(cmu.named.data.xpos[LEG_BODIES[0]] - cmu.named.data.xpos[LEG_BODIES[1]])
        self.body_scale = float(self.kinematics.leg_length() / cmu_leg)

    def walker_qpos(self, amc_path: Path) -> tuple[np.ndarray, np.ndarray]:
        """The clip as walker qpos (frames, 63), floor-corrected; and the floor plane removed: the height of the
        capture floor at the first root position and its slopes along world x and y (see ``floor_plane``)."""
        cmu_qpos, cmu_names = amc_to_cmu_qpos(amc_path, self.timestep)
        joints = map_joints(cmu_qpos[:, 7:], cmu_names, self.kinematics.joint_names)
        qpos = np.concatenate([cmu_qpos[:, :3] * self.body_scale, cmu_qpos[:, 3:7], joints], axis=1)
        qpos = self.limit_joints(qpos)
        plane = self.floor_plane(qpos)
        qpos[:, 2] -= plane[0] + (qpos[:, :2] - qpos[0, :2]) @ plane[1:]
        return qpos, plane

    def limit_joints(self, qpos: np.ndarray) -> np.ndarray:
        out = qpos.copy()
        wrapped = wrap_angle(qpos[:, 7:])
        out[:, 7:] = np.clip(wrapped, self.kinematics.joint_range[:, 0], self.kinematics.joint_range[:, 1])
        return out

    def foot_distances(self, qpos: np.ndarray) -> np.ndarray:
        distances = []
        for frame in qpos:
            self.kinematics.set_state(frame)
            distances.append(self.kinematics.lowest_foot_distance())
        return np.array(distances)

    def airborne_fraction(self, qpos: np.ndarray) -> float:
        """The fraction of frames on which no foot or toe is within ``AIRBORNE_CLEARANCE`` of the floor. The runs'
        flight phases give 0.02-0.26; the walks 0-0.19, except 08_07 (a walk with an exaggerated stride): 0.75, i.e.
        a walk in the air for 0.6 s at a time, which no physical walker can follow (docs/mocap.md)."""
        return float(np.mean(self.foot_distances(qpos) > AIRBORNE_CLEARANCE))

    def floor_plane(self, qpos: np.ndarray) -> np.ndarray:
        """The capture floor under the clip as (height at the first root position, slope along x, slope along y).

        The lowest foot/toe-to-floor distance d_t is fitted by a plane in the root's horizontal position, on the
        frames where a foot is down: least squares on all frames, then again on the frames whose residual is at
        most the ``FLOOR_PERCENTILE``-th percentile (stance, not swing or flight), and the plane is shifted so that
        ``FLOOR_PERCENTILE`` % of frames lie below it (the SOURCES.md "foot p10" statistic, on a tilted floor).
        The CMU walks rise by 1-2 cm per metre travelled after parse_amc, so a level offset alone leaves the feet
        10 cm in the air at the end of a 5 m walk. A slope is fitted only along a coordinate the root travels at
        least ``MIN_SLOPE_SPAN`` metres, so standing clips get a level floor."""
        distances = self.foot_distances(qpos)
        xy = qpos[:, :2] - qpos[0, :2]
        travelled = (xy.max(axis=0) - xy.min(axis=0)) >= MIN_SLOPE_SPAN
        design = np.concatenate([np.ones((len(xy), 1)), xy[:, travelled]], axis=1)
        stance = np.ones(len(xy), bool)
        for _ in range(2):
            coef = np.linalg.lstsq(design[stance], distances[stance], rcond=None)[0]
            residual = distances - design @ coef
            stance = residual <= np.percentile(residual, FLOOR_PERCENTILE)
        coef[0] += np.percentile(residual, FLOOR_PERCENTILE)
        plane = np.zeros(3)
        plane[0], plane[1:][travelled] = coef[0], coef[1:]
        return plane

    def features(self, qpos: np.ndarray, qvel: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Every ``WalkerPose`` field, shape (frames, ...), computed in MuJoCo from the qpos trajectory and its
        velocities (default: central differences of qpos)."""
        qvel = self.kinematics.differentiate(qpos, self.timestep) if qvel is None else qvel
        frames = []
        for q, v in zip(qpos, qvel):
            self.kinematics.set_state(q, v)
            frames.append(self.kinematics.features())
        return {field: np.stack([f[field] for f in frames]) for field in POSE_FIELDS}


def write_hdf5(path: Path, snippets: dict[str, dict[str, np.ndarray]], dt: float, attrs: dict) -> None:
    """Write snippets (id -> ``WalkerPose`` field -> (frames, ...)) in dm_control's mocap HDF5 layout."""
    from dm_control.locomotion.mocap import mocap_pb2

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    today = datetime.date.today()
    with h5py.File(path, "w") as f:
        f.attrs.update(attrs)
        for snippet_id, fields in snippets.items():
            group = f.create_group(snippet_id)
            num_steps = len(fields["position"])
            group.attrs.update(num_steps=num_steps, dt=dt, year=today.year, month=today.month, day=today.day)
            group.create_group("props")
            walker = group.create_group("walkers").create_group("walker_0")
            walker.attrs.update(name="CMUHumanoidPositionControlledV2020", model=mocap_pb2.Walker.CMU_2020,
                                mass=0.0, end_effector_names=np.array([], "S1"),
                                appendage_names=np.array([], "S1"))
            walker.create_group("scaling")
            walker.create_group("markers")
            for field in POSE_FIELDS:
                data = np.asarray(fields[field], np.float32).reshape(num_steps, -1).T
                walker.create_dataset(field, data=data, compression="gzip", compression_opts=9, shuffle=True)


def convert_clips(source_dir: Path, output: Path, clips: list[str] | None = None, mirror: bool = False,
                  curves: tuple[float, ...] = (), curve_clips: list[str] | None = None, loop_seconds: float = 0.0,
                  loop_clips: list[str] | None = None, curve_window: tuple[float, float] | None = None,
                  curve_style: str = "pivot", log=print) -> dict[str, dict]:
    """Convert clips (all ``*.amc`` in ``source_dir`` by default) into snippets in ``output``; returns per-snippet
    metadata (source clip, frame range, mirrored, yaw rate, floor plane, stride looped). ``curves``: yaw rates
    (degrees per second, > 0) at which the snippets of ``curve_clips`` (default: every clip) are also written bent
    left and right (``curve_qpos``). ``loop_seconds`` (> 0): the snippets of ``loop_clips`` (default: every clip),
    and their mirrors with ``mirror``, are also written looped over their stride to this length (``loop_qpos``);
    the bent variants then include the loops bent. ``curve_window`` (start, end) seconds: each bent snippet that
    lasts past ``end`` is also written bent only between them (``curve_qpos``, 5d). ``curve_style``: ``pivot``
    (``curve_qpos``) or ``stepped`` (``step_turn_qpos``, 5e)."""
    source_dir = Path(source_dir)
    clips = clips or sorted({p.stem for pattern in CLIP_PATTERNS for p in source_dir.glob(pattern)})
    if any(not (math.isfinite(rate) and rate > 0) for rate in curves):
        raise ConversionError(f"curve rates must be positive degrees per second, got {list(curves)}")
    for option, chosen, needed, what in (("--curve-clips", curve_clips, curves, "--curve RATE (the rates to bend "
                                          "them at)"), ("--loop-clips", loop_clips, loop_seconds,
                                                        "--loop SECONDS (the length to loop them to)")):
        outside = sorted(set(chosen or ()) - set(clips))
        if outside:
            raise ConversionError(f"{option} {', '.join(outside)} are not among the clips converted")
        if chosen and not needed:
            raise ConversionError(f"{option} needs {what}")
    if curve_style not in CURVE_STYLES:
        raise ConversionError(f"--curve-style must be one of {', '.join(CURVE_STYLES)}, got {curve_style!r}")
    unnamed = [rate for rate in curves if not all(is_curved(f"x{suffix}") for suffix in curve_suffix(rate))]
    if unnamed:   # an id the default sets could not tell from a captured snippet's
        raise ConversionError(f"curve rates must be plain decimals (e.g. 30 or 22.5), got {unnamed}")
    if curve_window is not None:
        start, end = curve_window
        if not curves:
            raise ConversionError("--curve-window needs --curve RATE (the rates to bend the snippets at)")
        if not (math.isfinite(start) and math.isfinite(end) and 0 <= start < end):
            raise ConversionError(f"--curve-window needs 0 <= START < END seconds, got {start:g} {end:g}")
        if not all(is_curved(f"x{suffix}") for suffix in curve_suffix(curves[0], curve_window)):
            raise ConversionError(f"--curve-window seconds must be plain decimals (e.g. 3 or 6.5), got {curve_window}")
    if loop_seconds and not (math.isfinite(loop_seconds) and loop_seconds > 0 and is_looped(loop_suffix(loop_seconds))):
        raise ConversionError(f"--loop must be a positive plain decimal number of seconds, got {loop_seconds}")
    if not clips:
        raise ConversionError(f"no .amc or .bvh clips in {source_dir}")
    converter = Converter()
    dt = converter.timestep

    def bend(q, rate, window):
        if curve_style == "stepped":
            return step_turn_qpos(q, rate, converter.kinematics, dt, window)
        return curve_qpos(q, rate, dt, window)

    snippets, meta = {}, {}
    for clip in clips:
        qpos, plane = converter.walker_qpos(clip_path(source_dir, clip))
        for k, (start, end) in enumerate(cut_snippets(len(qpos), dt)):
            captured = [(f"{clip}-{k}", qpos[start:end], False)]
            if mirror:
                captured.append((f"{clip}-{k}-mirror",
                                 converter.limit_joints(mirror_qpos(qpos[start:end], converter.kinematics)), True))
            pieces = [(snippet_id, q, mirrored, 0.0, None) for snippet_id, q, mirrored in captured]
            if loop_seconds and (loop_clips is None or clip in loop_clips):
                frames = round(loop_seconds / dt) + 1
                if frames <= end - start:
                    raise ConversionError(f"--loop {loop_seconds:g} s is not longer than snippet {clip}-{k} "
                                          f"({(end - start - 1) * dt:.2f} s)")
                for snippet_id, q, mirrored in captured:
                    stride = find_stride(q, dt)
                    pieces.append((snippet_id + loop_suffix(loop_seconds), loop_qpos(q, *stride[:2], frames),
                                   mirrored, 0.0, stride))
            unbent = [p for p in pieces if not p[2]]   # not the mirrors, and not what one rate bent for the next
            for rate in (curves if curve_clips is None or clip in curve_clips else ()):
                for snippet_id, q, _, _, stride in unbent:
                    windows = [None] + ([curve_window] if curve_window is not None
                                        and (len(q) - 1) * dt > curve_window[1] else [])
                    for window in windows:
                        for suffix, sign in zip(curve_suffix(rate, window, curve_style), (1.0, -1.0)):
                            pieces.append((snippet_id + suffix, bend(q, sign * math.radians(rate), window), False,
                                           sign * rate, stride))
            for snippet_id, snippet_qpos, mirrored_flag, yaw_rate, stride in pieces:
                snippets[snippet_id] = converter.features(snippet_qpos)
                meta[snippet_id] = dict(clip=clip, start=start, end=end, mirrored=mirrored_flag, yaw_rate=yaw_rate,
                                        floor=plane, stride=stride)
                twist = ""
                if yaw_rate:   # what a bend asks of a planted foot (5e)
                    twist = converter.kinematics.stance_twist(snippet_qpos, dt)
                    twist = f", stance foot twists a median {math.degrees(np.median(twist)):.0f} deg/s"
                if stride:
                    log(f"{snippet_id}: {len(snippet_qpos)} frames, looping frames {stride[0]}-{stride[1]} "
                        f"(mismatch {stride[2]:.3f}){twist}")
                elif twist:
                    log(f"{snippet_id}: {len(snippet_qpos)} frames{twist}")
        slip = converter.kinematics.stance_slip(qpos, dt)
        log(f"{clip}: {len(qpos)} frames, floor height {plane[0]:+.3f} m, slope x {plane[1]:+.3f} y {plane[2]:+.3f}, "
            f"root height median {np.median(qpos[:, 2]):.3f} m, stance-foot slip "
            + (f"median {np.median(slip):+.2f} m/s" if len(slip) else "- (no single stance)")
            + f", no foot within {AIRBORNE_CLEARANCE * 100:.0f} cm of the floor on "
              f"{converter.airborne_fraction(qpos):.0%} of frames")

    def source_row(snippet_id, m):
        row = [snippet_id, m["clip"], m["start"], m["end"], int(m["mirrored"]), *(f"{v:.4f}" for v in m["floor"])]
        row += [f"{m['yaw_rate']:g}"] if curves else []
        row += list(m["stride"][:2] if m["stride"] else (-1, -1)) if loop_seconds else []
        return " ".join(str(v) for v in row)

    attrs = dict(source="CMU Graphics Lab Motion Capture Database, http://mocap.cs.cmu.edu (see data/mocap/cmu/"
                 "SOURCES.md); converted by envs/mocap/convert.py", walker="CMUHumanoidPositionControlledV2020",
                 control_timestep=dt, body_scale=converter.body_scale,
                 snippet_source=np.array([source_row(sid, m) for sid, m in meta.items()], "S"),
                 snippet_source_columns="id clip start_frame end_frame mirrored floor_height slope_x slope_y"
                 + (" yaw_rate_deg_per_s" if curves else "") + (" loop_stride_start loop_stride_end"
                                                                 if loop_seconds else ""))
    write_hdf5(output, snippets, dt, attrs)
    return meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.mocap.convert", description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=SOURCE_DIR, help="folder of CMU clips (.amc, or .bvh of the CMU BVH release)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="HDF5 file to write")
    parser.add_argument("--clips", nargs="*", help="clip names (e.g. 07_01); default: every .amc and .bvh in --source")
    parser.add_argument("--mirror", action="store_true",
                        help="also write each snippet's mirror image, id <snippet-id>-mirror (doubles the file)")
    parser.add_argument("--curve", type=float, nargs="*", default=[], metavar="DEG_PER_S",
                        help="also write each snippet bent into a left and a right arc at these yaw rates, ids "
                             "<snippet-id>-left<RATE> and -right<RATE> (not the seed's: turning data for steering)")
    parser.add_argument("--curve-clips", nargs="*", help="the clips whose snippets --curve bends (default: all)")
    parser.add_argument("--curve-window", type=float, nargs=2, metavar=("START", "END"),
                        help="also write each bent snippet lasting past END bent only between START and END seconds, "
                             "straight before and after, ids <snippet-id>-left<RATE>from<START>to<END> and -right...")
    parser.add_argument("--curve-style", choices=CURVE_STYLES, default="pivot",
                        help="how --curve bends: pivot (the root turns over a straight gait; the stance foot slides "
                             "and twists) or stepped (the stance feet stay put and the hips turn; ids "
                             "<snippet-id>-stepleft<RATE> and -stepright<RATE>)")
    parser.add_argument("--loop", type=float, default=0.0, metavar="SECONDS",
                        help="also write each snippet (and its mirror) made this long by repeating its stride, id "
                             "<snippet-id>-loop<SECONDS> (not the seed's: walks longer than the clips)")
    parser.add_argument("--loop-clips", nargs="*", help="the clips whose snippets --loop loops (default: all)")
    args = parser.parse_args(argv)
    try:
        meta = convert_clips(args.source, args.output, args.clips, mirror=args.mirror, curves=tuple(args.curve),
                             curve_clips=args.curve_clips, loop_seconds=args.loop, loop_clips=args.loop_clips,
                             curve_window=tuple(args.curve_window) if args.curve_window else None,
                             curve_style=args.curve_style)
    except ConversionError as e:
        parser.exit(2, f"error: {e}\n")
    print(f"wrote {len(meta)} snippets to {args.output} ({args.output.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
