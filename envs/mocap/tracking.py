"""Motion-capture tracking (seed 000 §8.1: the experts' single-clip tracking tasks) on the shipped CMU snippets.

dm_control's ``MultiClipMocapTracking`` (``locomotion.tasks.reference_pose``) with the CoMic reward
(``reward_type="comic"``, Hasenclever et al. 2020: 0.5 * termination reward + 0.5 * (0.1 exp(-10 |com err|^2) +
exp(-0.1 |joint vel err|^2) + 0.15 exp(-40 |appendage err|^2) + 0.65 exp(-2 |body quat err|^2)); maximum 1.45 per
step). The seed scores experts with the SAMCON energy; its exact weights are not given, so we use dm_control's
published CoMic reward, which tracks the same quantities. Settings are dm_control's and CoMic's defaults:
walker ``CMUHumanoidPositionControlledV2020``, flat ``Floor``, physics timestep 0.005 s, control timestep = the
data's dt (0.03 s), reference look-ahead ``ref_steps`` = (1, 2, 3, 4, 5), random start at any step of the snippet
that leaves ``min_steps`` = 10 steps, early termination (discount 0) when the tracking error
0.5 * mean |body position error| + 0.5 * mean |joint angle error| exceeds 0.3 (with ``ending="fall"``, instead
when the head drops below 0.95 m: a walker that strays from the reference's path walks on); reaching the snippet's
end is a truncation (discount 1).

Names: ``humanoid-track`` draws a snippet per episode (uniformly over start points, i.e. weighted by length) from
every snippet in ``data/mocap/cmu_snippets.h5`` except the made-up variants (curved, ``<id>-left30``,
``<id>-right30``: turning data made from the straight walks; looped, ``<id>-loop<SECONDS>``: walks made longer by
repeating a stride; envs/mocap/convert.py; each is still an env of its own, ``humanoid-track:07_01-0-left30``); ``humanoid-track:<snippet-id>`` (e.g. ``humanoid-track:07_01-0``,
``humanoid-track:07_01-0-mirror``) tracks one snippet; ``envs.make("humanoid-track", clip="07_01-0")`` is the same.
``clip`` also takes a list of snippet ids. ``ref_path`` selects another HDF5 file in the same schema.
``reference="time"`` (or the names ``humanoid-track-time[:<snippet-id>]``) keeps only ``walker/time_in_clip`` in the task group (a single-clip, time-indexed expert needs
nothing else; 225 observation numbers instead of 2 785, which makes expert training about 4x cheaper here).

Observations: ``proprio`` = the walker's proprioception, kinematic and dynamic sensors (what the task enables);
``task`` = the reference features (``walker/reference_*``: joints, body positions and quaternions relative to the
walker, root pose, appendages, for the next 5 reference steps; dm_control's default set, 2560 numbers) and
``walker/time_in_clip`` (the experts of §8.1 are time-indexed). The task's bookkeeping observables
(``clip_id``, ``*_control``) are disabled: a clip index would let a policy memorise clips.
"""
from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import NamedTuple

import h5py
import numpy as np
from dm_control import composer
from dm_control.locomotion.arenas import floors
from dm_control.locomotion.tasks.reference_pose import tracking, types
from dm_control.locomotion.walkers import cmu_humanoid

from envs import EnvError
from envs.dmc import DMEnv
from envs.locomotion import HEAD_HEIGHT_LIMIT
from envs.mocap.convert import DEFAULT_OUTPUT, is_augmented

FAMILY = "humanoid-track"
TIMED_FAMILY = "humanoid-track-time"   # reference="time": the experts' time-indexed observations
RESIDUAL_FAMILY = "humanoid-track-residual"   # reference="time" and residual_scale=RESIDUAL_SCALE: the experts' task
FAMILIES = (FAMILY, TIMED_FAMILY, RESIDUAL_FAMILY)  # envs.mocap.FAMILIES repeats these names (tested equal)
RESIDUAL_SCALE = 0.3
REF_STEPS = (1, 2, 3, 4, 5)
MIN_STEPS = 10
TERMINATION_ERROR_THRESHOLD = 0.3
ENDINGS = ("tracking", "fall")   # what ends an episode early (``make``)
PHYSICS_TIMESTEP = 0.005
MAX_COMIC_REWARD = 0.5 * 1.0 + 0.5 * (0.1 + 1.0 + 0.15 + 0.65)   # every term at its optimum
# dm_control's HDF5 loader uses a protobuf call that newer protobuf deprecates; harmless, and it fires per clip.
warnings.filterwarnings("ignore", message=r"label\(\) is deprecated", category=DeprecationWarning)
_BOOKKEEPING = ("walker/clip_id", "walker/velocimeter_control", "walker/gyro_control", "walker/joints_vel_control")


@functools.lru_cache(maxsize=16)
def snippet_ids(ref_path: str | Path = DEFAULT_OUTPUT, augmented: bool = False) -> list[str]:
    """The snippets of a mocap file: the clips as captured and their mirrors; with ``augmented``, also the curved
    and looped variants (envs/mocap/convert.py ``curve_qpos``, ``loop_qpos``), which every default set leaves out."""
    if not Path(ref_path).is_file():
        raise EnvError(f"no mocap data at {ref_path} (regenerate it with `python -m envs.mocap.convert`)")
    with h5py.File(ref_path, "r") as f:
        return sorted(k for k in f.keys() if augmented or not is_augmented(k))


def snippet_frames(snippet: str, ref_path: str | Path = DEFAULT_OUTPUT) -> int:
    """The number of mocap frames of ``snippet`` (its length: one control step per frame)."""
    if snippet not in snippet_ids(ref_path, augmented=True):
        raise EnvError(f"unknown snippet {snippet!r}")
    with h5py.File(ref_path, "r") as f:
        return int(f[snippet].attrs["num_steps"])


def looped_stride(snippet: str, ref_path: str | Path = DEFAULT_OUTPUT) -> tuple[int, int] | None:
    """The frames [start, end) whose stride a looped snippet repeats from frame ``start`` on (convert.py's
    ``loop_qpos``), as the mocap file records it; None for a snippet that is not looped."""
    snippet_frames(snippet, ref_path)   # EnvError for an unknown snippet
    with h5py.File(ref_path, "r") as f:
        columns = str(f.attrs.get("snippet_source_columns", "")).split()
        rows = [str(row, "utf-8").split() for row in f.attrs.get("snippet_source", [])]
    if "loop_stride_start" not in columns:
        return None
    for row in rows:
        if row[0] == snippet:
            start, end = (int(row[columns.index(c)]) for c in ("loop_stride_start", "loop_stride_end"))
            return (start, end) if end > start >= 0 else None
    return None


def names() -> list[str]:
    return [f for family in FAMILIES for f in (family, *(f"{family}:{sid}" for sid in snippet_ids(augmented=True)))]


REFERENCES = ("full", "time")


def make(name: str, seed: int | None = None, action_repeat: int = 1, clip: str | list[str] | None = None,
         ref_path: str | Path = DEFAULT_OUTPUT, render_size: tuple[int, int] = (240, 320), reference: str = "full",
         clip_start: bool = False, residual_scale: float | None = None,
         termination_threshold: float = TERMINATION_ERROR_THRESHOLD, ending: str = "tracking", **unknown) -> DMEnv:
    """``termination_threshold``: the tracking error that ends an episode (dm_control's CoMic setting, 0.3; its
    body term compares world positions, so a walker that drifts from the reference's path ends there upright).
    ``ending``: what ends an episode before the clip's end (``ENDINGS``): "tracking" (that error, dm_control's) or
    "fall" (the head dropping below ``HEAD_HEIGHT_LIMIT``, whatever the tracking error: a walker on its feet that
    strays from the reference's path walks on; the threshold then only scales the reward's termination term)."""
    if unknown:
        raise EnvError(f"{name}: unknown option(s) {', '.join(sorted(unknown))} (mocap tracking takes clip, ref_path, "
                       "reference, clip_start, residual_scale, termination_threshold, ending and render_size)")
    if not termination_threshold > 0:
        raise EnvError(f"{name}: termination_threshold must be > 0, got {termination_threshold}")
    if ending not in ENDINGS:
        raise EnvError(f"{name}: ending must be one of {', '.join(ENDINGS)}, not {ending!r}")
    if reference not in REFERENCES:
        raise EnvError(f"{name}: reference must be one of {', '.join(REFERENCES)}, not {reference!r}")
    family, _, named_clip = name.partition(":")
    if family not in FAMILIES:
        raise EnvError(f"unknown mocap task {name!r}; names are {', '.join(FAMILIES)}, each optionally "
                       "followed by :<snippet-id>")
    if family in (TIMED_FAMILY, RESIDUAL_FAMILY):
        reference = "time"
    if family == RESIDUAL_FAMILY and residual_scale is None:
        residual_scale = RESIDUAL_SCALE
    if residual_scale is not None and not 0 < residual_scale <= 2:
        raise EnvError(f"{name}: residual_scale must be in (0, 2], got {residual_scale}")
    if named_clip and clip is not None:
        raise EnvError(f"{name} already names a snippet; do not pass clip= as well")
    available = snippet_ids(ref_path, augmented=True)
    clips = [named_clip] if named_clip else ([clip] if isinstance(clip, str) else
                                             list(clip or snippet_ids(ref_path)))
    unknown_clips = [c for c in clips if c not in available]
    if unknown_clips or not clips:
        raise EnvError(f"unknown snippet(s) {', '.join(unknown_clips) or '(none given)'} in {ref_path}; "
                       f"snippets are {', '.join(available[:6])}, ... ({len(available)} in all)")
    return TrackingEnv(clips, ref_path=ref_path, seed=seed, action_repeat=action_repeat, render_size=render_size,
                       reference=reference, clip_start=clip_start, residual_scale=residual_scale,
                       termination_threshold=termination_threshold, ending=ending)


def build_task(clips: list[str], ref_path: str | Path = DEFAULT_OUTPUT, playback: bool = False,
               reference: str = "full", clip_start: bool = False,
               termination_threshold: float = TERMINATION_ERROR_THRESHOLD, ending: str = "tracking"):
    """dm_control's tracking task on ``clips``; ``playback`` sets the walker to the reference after every step;
    ``reference="time"`` drops the reference features, keeping the time in the clip; ``clip_start`` starts every
    episode at the snippet's first frame (rollouts and evaluations of whole snippets) instead of a random one;
    ``ending``: see ``make``."""
    with h5py.File(ref_path, "r") as f:   # end steps from the file, so clips load lazily, not all at start
        end_steps = tuple(int(f[c].attrs["num_steps"]) for c in clips)
    task_class = ReferencePlayback if playback else ServoStartTracking
    task = task_class(
        walker=cmu_humanoid.CMUHumanoidPositionControlledV2020, arena=floors.Floor(), ref_path=str(ref_path),
        dataset=types.ClipCollection(ids=tuple(clips), end_steps=end_steps), ref_steps=REF_STEPS,
        min_steps=MIN_STEPS, reward_type="comic", termination_error_threshold=termination_threshold,
        physics_timestep=PHYSICS_TIMESTEP, always_init_at_clip_start=clip_start)
    task.ends_on_fall = ending == "fall"
    for key, obs in task.observables.items():
        if key in _BOOKKEEPING or (reference == "time" and "reference" in key):
            obs.enabled = False
    return task


def heading(quaternion: np.ndarray) -> float:
    """The yaw (rad) of a body whose orientation is ``quaternion`` (w, x, y, z): the direction of its x axis."""
    w, x, y, z = quaternion
    return float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))


def servo_command(angles, low, high):
    """The position-servo command that targets joint ``angles`` (the actuators map [-1, 1] linearly onto each
    joint's range [low, high])."""
    return 2.0 * (angles - low) / (high - low) - 1.0


class ServoStartTracking(tracking.MultiClipMocapTracking):
    """dm_control's tracking task with the position servos' activations set to hold the start pose.

    dm_control puts the walker on the reference pose but leaves the servos' filtered activations (the
    ``actuator_activation`` observation; time constant 0.03 s, one control step) at 0, i.e. every servo pulling
    towards the middle of its joint's range: whatever the first action, the body sags for the first steps (the root
    drops ~8 cm within 4 steps on 07_01-0). Here each activation starts at the command that targets the joint's
    start angle, the state of servos that were already tracking the pose."""

    ends_on_fall = False   # ``make``'s ending="fall": the head below HEAD_HEIGHT_LIMIT ends the episode

    def initialize_episode(self, physics, random_state):
        super().initialize_episode(physics, random_state)
        hold_pose_activations(physics, self._walker)

    def get_reward(self, physics):
        reward = super().get_reward(physics)   # also sets dm_control's early-end flag from the tracking error
        if self.ends_on_fall:
            self._should_truncate = bool(physics.bind(self._walker.head).xpos[2] < HEAD_HEIGHT_LIMIT)
        return reward


def hold_pose_command(physics, walker) -> np.ndarray:
    """The servo commands that hold every actuated joint at its current angle."""
    joints = physics.bind([actuator.joint for actuator in walker.actuators])
    low, high = joints.range.T
    return np.clip(servo_command(joints.qpos, low, high), -1.0, 1.0)


def hold_pose_activations(physics, walker) -> None:
    """Set each position servo's filtered activation to the command that holds its joint's current angle."""
    physics.bind(walker.actuators).act = hold_pose_command(physics, walker)


class MocapStarts:
    """Start states drawn from the frames of the shipped snippets (dm_control's ``CMUMocapInitializer`` does the
    same from one clip): the walker takes a frame's root height and orientation, joint angles and every velocity,
    and its servos hold the pose. The clip's planar position is dropped; the caller places and turns the walker
    (``shift_pose(..., rotate_velocity=True)`` keeps the velocity consistent with the new heading)."""

    FIELDS = ("position", "quaternion", "joints", "velocity", "angular_velocity", "joints_velocity")

    def __init__(self, ref_path: str | Path = DEFAULT_OUTPUT, snippet: str | None = None):
        """``snippet``: start every episode on that snippet's first frame (any snippet of the file, made-up
        variants included: a controller that follows one reference from its start needs its start)."""
        try:
            ids = snippet_ids(ref_path, augmented=snippet is not None)   # default: the clips as captured, mirrors
            if snippet is not None:
                if snippet not in ids:
                    raise EnvError(f"no snippet {snippet!r} in it")
                ids = [snippet]
            with h5py.File(ref_path, "r") as f:
                frames = {k: np.concatenate([f[i]["walkers/walker_0"][k][()].T for i in ids]) for k in self.FIELDS}
            if snippet is not None:
                frames = {k: v[:1] for k, v in frames.items()}
        except (OSError, KeyError, EnvError) as e:
            raise EnvError(f"cannot read start states from {ref_path}: {e}") from None
        self.frames, self.count = frames, len(frames["joints"])

    def place(self, physics, walker, random_state) -> int:
        """Put ``walker`` on a uniformly drawn frame, its root above the origin; returns the frame's index."""
        i = int(random_state.randint(self.count))
        frame = {k: v[i].astype(np.float64) for k, v in self.frames.items()}
        physics.bind(walker.mocap_joints).qpos = frame["joints"]
        physics.bind(walker.mocap_joints).qvel = frame["joints_velocity"]
        walker.set_pose(physics, position=[0.0, 0.0, frame["position"][2]], quaternion=frame["quaternion"])
        walker.set_velocity(physics, velocity=frame["velocity"], angular_velocity=frame["angular_velocity"])
        hold_pose_activations(physics, walker)
        return i


class ReferencePlayback(ServoStartTracking):
    """The tracking task with the walker put on the reference state after each physics step, before the features,
    error and reward are computed (dm_control's ``PlaybackTask`` does the same but scores 0). A check of the data
    and the reward: a perfect tracker scores ``MAX_COMIC_REWARD`` on every step."""

    def after_step(self, physics, random_state):
        self._time_step += 1          # _set_walker writes the reference at self._time_step
        self._set_walker(physics)
        self._time_step -= 1
        super().after_step(physics, random_state)


def observation_group(key: str) -> str:
    """Reference features and the time in the clip (what makes the experts time-indexed, §8.1) are the task."""
    return "task" if "reference" in key or key.endswith("time_in_clip") else "proprio"


class TrackingEnv(DMEnv):
    """``humanoid-track`` as a Gymnasium env. ``info["clip"]`` names the snippet being tracked.

    With ``residual_scale`` (the ``humanoid-track-residual`` names) the agent's action is a correction to a
    feed-forward reference controller: the walker receives ``compose(action) = clip(a_ref(t) + residual_scale *
    action, -1, 1)``, where a_ref(t) commands the position servos to the reference's joint angles of the next frame
    (``reference_action``). Not in the seed: its experts learn the whole action by RL with ~10^9 steps; here an
    expert must learn in ~10^4-10^5 steps on one core, and the feed-forward controller alone already tracks 07_01-0
    for 31 steps (1 s) where an svg0 policy trained from scratch for 10^4 steps falls after 2. ``info`` then holds
    the ``applied_action``, which is what NPMP distils (the walker's actual command)."""

    def __init__(self, clips: list[str], ref_path: str | Path = DEFAULT_OUTPUT, seed: int | None = None,
                 action_repeat: int = 1, render_size: tuple[int, int] = (240, 320), playback: bool = False,
                 reference: str = "full", clip_start: bool = False, residual_scale: float | None = None,
                 termination_threshold: float = TERMINATION_ERROR_THRESHOLD, ending: str = "tracking"):
        self.clips = list(clips)
        self.residual_scale = residual_scale

        def load(env_seed: int):
            task = build_task(self.clips, ref_path, playback=playback, reference=reference,
                              clip_start=clip_start, termination_threshold=termination_threshold, ending=ending)
            return composer.Environment(task, random_state=env_seed, strip_singleton_obs_buffer_dim=True)

        super().__init__(load, seed=seed, action_repeat=action_repeat, render_size=render_size,
                         group_of=observation_group, camera_id="walker/back")
        self._ref_path = ref_path
        self._reference_actions: dict[str, np.ndarray] = {}

    def feed_forward_actions(self, clip: str | None = None) -> np.ndarray:
        """[num_steps, actuators] actions that command each servo to the reference joint angle of each frame of
        ``clip`` (default: the current one); the position actuators map [-1, 1] linearly onto their joint's range."""
        clip = clip or self.clip
        if clip not in self._reference_actions:
            walker, physics = self.walker, self._env.physics
            joints = [actuator.joint for actuator in walker.actuators]
            mocap_order = [joint.name for joint in walker.mocap_joints]
            rows = [mocap_order.index(joint.name) for joint in joints]
            low, high = physics.bind(joints).range.T
            with h5py.File(self._ref_path, "r") as f:
                angles = f[clip]["walkers/walker_0/joints"][()][rows].T  # [num_steps, actuators]
            self._reference_actions[clip] = np.clip(servo_command(angles, low, high), -1.0, 1.0).astype(np.float32)
        return self._reference_actions[clip]

    def reference_action(self) -> np.ndarray:
        """a_ref(t): the servo targets of the reference's next frame."""
        frames = self.feed_forward_actions()
        return frames[min(self.time_step + 1, len(frames) - 1)]

    # What a planner needs besides the physics (agents/mpc.py): dm_control keeps these on its task.
    @property
    def walker(self):
        return self._env.task._walker

    @property
    def clip(self) -> str:
        return self.clips[self._env.task._current_clip_index]

    @property
    def time_step(self) -> int:
        """The reference frame the walker is being compared with (0 at the episode's first frame)."""
        return int(self._env.task._time_step)

    @property
    def last_step(self) -> int:
        """The reference frame at which the episode ends (truncation: the clip's end less the look-ahead)."""
        return int(self._env.task._last_step)

    @property
    def control_timestep(self) -> float:
        return float(self._env.control_timestep())

    def clip_reference(self) -> dict[str, np.ndarray]:
        """The current snippet's reference features per frame (joints [T, 56], body_positions [T, 31, 3], ...), in
        the world frame the simulator uses."""
        return self._env.task._clip_reference_features

    def reference_offset(self) -> tuple[float, float]:
        """Where the walker stands against the reference's root now: (distance in the ground plane in m, the turn in
        rad, wrapped to [-pi, pi], that would bring the walker's heading onto the reference's)."""
        qpos, reference, t = self.physics.data.qpos, self.clip_reference(), self.time_step
        turn = heading(reference["quaternion"][t]) - heading(qpos[3:7])
        return (float(np.linalg.norm(reference["position"][t][:2] - qpos[:2])),
                float(np.arctan2(np.sin(turn), np.cos(turn))))

    def compose(self, action: np.ndarray) -> np.ndarray:
        """The walker's command for an agent action (the action itself without ``residual_scale``)."""
        if self.residual_scale is None:
            return np.clip(np.asarray(action, np.float32), -1.0, 1.0)
        return np.clip(self.reference_action() + self.residual_scale * np.asarray(action, np.float32), -1.0, 1.0)

    def step(self, action):
        applied = self.compose(action)
        obs, reward, terminated, truncated, info = super().step(applied)
        return obs, reward, terminated, truncated, {**info, "applied_action": applied}

    def task_state(self) -> None:
        """Not captured: dm_control's tracking task keeps its clip, reference cursor and termination state in private
        attributes; a resumed run starts a fresh episode here."""
        return None

    def _info(self) -> dict:
        return {"clip": self.clip, "time_step": self.time_step}


class Reference(NamedTuple):
    """A clip as the closed-loop encoder reads it (``reference_playback``): the walker put on each frame
    (``states [T+1, S]``, proprio) and the reference root's floor pose on each (``root [T+1, 3]``: x, y in m and
    the heading in rad, ``tracking.heading``), from which primitives with ``path_offsets`` read the path ahead."""
    states: np.ndarray
    root: np.ndarray


def reference_playback(snippet: str, seed: int = 0, ref_path=None) -> Reference:
    """The snippet itself as the encoder reads it: the proprioceptive states [T+1, S] of the walker put on the
    reference at every frame (``ReferencePlayback``) with its servos commanded to the reference (so the actuator
    activations it reports are those of a perfect tracker), and the reference root's floor pose on each frame.
    What the encoder reads when the primitives imitate a clip they are shown."""
    kwargs = {"ref_path": ref_path} if ref_path is not None else {}
    env = TrackingEnv([snippet], playback=True, reference="time", clip_start=True, seed=seed, **kwargs)
    try:
        obs, _ = env.reset(seed=seed)
        clip = env.clip_reference()
        states, root = [], []

        def record(obs):
            t = env.time_step
            states.append(obs["proprio"])
            root.append([*clip["position"][t][:2], heading(clip["quaternion"][t])])

        record(obs)
        while True:
            obs, _, terminated, truncated, _ = env.step(env.reference_action())
            record(obs)
            if terminated or truncated:
                return Reference(np.asarray(states, np.float32), np.asarray(root, np.float32))
    finally:
        env.close()
