"""Locomotion tasks of seed 000, Ch. 7 (§7.5.1; task details §7.7.1), on dm_control.locomotion walkers.

Names are ``<walker>-<task>``:
- walkers: ``jumping_ball`` (``JumpingBallWithHead``, control timestep 0.025 s as in §7.7.1), ``ant`` (``Ant``,
  0.05 s as in §7.7.1), ``cmu_humanoid`` (``CMUHumanoidPositionControlledV2020``, dm_control's usual 0.03 s). The
  thesis' "simple humanoid" (28 DoF, 21 actuators) is not published; the CMU humanoid (56 actuators) stands in.
- tasks (physics timestep 0.005 s, flat ``Floor`` arena, targets drawn uniformly in its 8 m x 8 m square):
  - ``walk`` (dense, 10 s): a direction (forward/backward/left/right = world +x/-x/+y/-y) is drawn uniformly at
    the start and again half-way (it may repeat). Reward r = exp(-|v - v_t|^2), v the walker's planar velocity
    (its root body's world-frame xy velocity), v_t the target velocity of speed 3 in the commanded direction.
    This vector form (the issue's spec) also penalises sideways velocity; §7.7.1's wording ("v_cur the
    instantaneous velocity in the required direction") reads as the scalar projection, which would not.
    Task features: the direction one-hot (4) and v_t in the walker's egocentric frame (3), which tells the walker
    its heading (proprioception is egocentric and carries no yaw). On ``cmu_humanoid`` the episode terminates
    (discount 0) when the head body is lower than 0.95 m (the standing head is at about 1.8 m).
  - ``go-to-target`` (sparse, 20 s): K targets (default K = 2, as in the thesis' two-target box task; set with
    ``num_targets``). One of them, drawn uniformly, is the goal; reaching it (root within 1 m in the plane,
    dm_control's ``GoToTarget`` tolerance) gives r = 60 and terminates the episode (discount 0). Task features:
    the goal's position relative to the walker and every target's relative position, all in the walker's
    egocentric frame (3 + 3K).
  - ``moving-target`` (sparse, 25 s): one target; r = 1 on every step the walker is within 1 m of it; after 10
    consecutive on-target steps the target respawns elsewhere. Task features: its egocentric position (3). Two
    dense terms, off by default and not the thesis's: ``progress_weight`` w adds w times the metres each step
    brought the walker closer to its target (negative when it moved away; a respawn starts a new distance, not a
    penalty), ``alive_bonus`` b adds b on every step (the step of a fall included).
  - ``target-speed`` (dense, 20 s; seed 000 §8.4 (iii), Fig 8.6b, not a Ch 7 task): "random changing target
    speed, Gaussian reward centred at the target speed". The target speed v* is drawn uniformly from
    ``SPEED_RANGE[walker]`` (cmu_humanoid 0..4 m/s: standing, walking, jogging and the slower runs; the shipped CMU
    snippets walk at 1.2-2.1 m/s and run at 3.2-5 m/s, mean root speed per snippet; jumping_ball and ant 0..3 m/s,
    up to the walk task's v_t = 3) at the start and redrawn at random times: on each control step with probability control_timestep / ``SPEED_CHANGE_MEAN``
    (a Poisson process, one change every 5 s on average; the thesis gives no schedule). Reward
    r = exp(-(v - v*)^2 / (2 sigma^2)) with v the walker's horizontal speed |v_xy| (the norm of the root's planar
    world velocity: the task asks for a speed, not a direction, so the policy may run any way it likes) and
    sigma = 1/sqrt(2) m/s, i.e. r = exp(-(v - v*)^2), the kernel of the walk reward. Task features: v* (1). The
    redraw happens after the step's reward, before its observation, so the policy sees the new v* at once.
    The episode's mean |v - v*| goes to ``info["episode_metrics"]`` as ``task/speed_error`` on its last step (the
    seed's "speed tracking error").
  - ``multitask``: each episode draws one of the three Ch 7 tasks uniformly. Task features: a one-hot task id (3) and
    the episode's task features zero-padded to the longest (3 + 3K); ``info["task"]`` names the task.
- Falls: on ``cmu_humanoid`` the episode terminates (discount 0) when the head body is lower than 0.95 m in ``walk``
  (§7.7.1) and ``target-speed``; ``go-to-target`` and ``moving-target`` keep Ch 7's rule (no fall termination)
  unless ``fall_termination=True`` is passed. Where falls terminate, ``info["fell"]`` is present on every step and
  True on the step whose fall ended the episode (so a trainer can count falls).
- Aliases (seed 000 §8.4 reuse tasks, for ``--agent npmp``): ``humanoid`` = ``cmu_humanoid-moving-target`` with
  ``fall_termination=True`` and ``start="mocap"`` (Fig 8.6a: go-to-target where the target moves to a random spot,
  here at least 2 m from the walker anywhere in the 8 m square, after the walker has been on it for 10 steps; a
  fallen humanoid cannot get up, so the episode ends, and the falls are counted); ``humanoid-progress``,
  ``humanoid-alive`` and ``humanoid-shaped`` = the same with ``progress_weight=5``, with ``alive_bonus=1``, and with
  both at 5 and 0.2 (departures from the thesis's sparse reward, measured in docs/npmp.md); ``humanoid-speed`` =
  ``cmu_humanoid-target-speed``.
- The walker starts at a uniformly random position and heading (the thesis: "randomly initialised"), by default in
  its upright default pose at rest (``start="stand"``). ``start="mocap"`` (cmu_humanoid only; the ``humanoid`` alias
  uses it) instead puts it on a uniformly drawn frame of the shipped CMU snippets (data/mocap/cmu_snippets.h5: walks
  and runs) with that frame's joint angles and velocities, root height, tilt and velocity (turned with the heading),
  and servos that hold the pose -- what dm_control's ``CMUMocapInitializer`` does with one clip. The thesis does not
  say how its reuse episodes start; the frozen primitives were distilled only from such states, never from the
  default pose at rest, which none of the clips contains. ``start_snippet`` (with ``start="mocap"``; ``ref_path``
  names another mocap file, such as a looped walk's, ``envs.mocap.convert --loop``) starts every episode on that
  snippet's first frame instead: a low level that follows one reference walk (``--agent npmp`` with
  ``steer_walk``, agents/npmp.py) starts where its reference starts. Targets are
  drawn at least 2 m from the walker (and 2 m from each other) so that no episode starts on its goal and the
  targets stay distinguishable; a respawned moving target is at least 2 m from the walker.

Observations (``envs.spaces``): ``proprio`` holds only the walker's own observables (joint positions/velocities,
egocentric body positions, world z-axis in the body frame, body height, gyro, accelerometer, velocimeter, touch,
force/torque sensors), exactly as dm_control's ``GoToTarget`` enables them; targets are sites, which no sensor or
contact sees, so ``proprio`` is independent of the task. ``task`` holds the task features above. A time limit is a
truncation (discount 1); reaching the goal and the humanoid's fall are terminations (discount 0).
"""
from __future__ import annotations

import logging

import mujoco
import numpy as np
from dm_control import composer
from dm_control.composer.observation import observable

from envs import EnvError
from envs.dmc import DMEnv

WALKERS = ("jumping_ball", "ant", "cmu_humanoid")
TASKS = ("walk", "go-to-target", "moving-target")  # the Ch 7 tasks (``multitask`` draws among these)
EXTRA_TASKS = ("target-speed",)                    # seed 000 §8.4 reuse task
# name -> (locomotion name, options): one implementation under a short name
_HEADLINE = {"fall_termination": True, "start": "mocap"}   # the headline task's moving target (Fig 8.6a)
ALIASES = {"humanoid": ("cmu_humanoid-moving-target", _HEADLINE),
           # the same task with dense terms (departures from the thesis's sparse reward, measured in docs/npmp.md):
           # 5 per metre of progress towards the target; 1 per step up (survival alone); both, with 0.2 per step
           "humanoid-progress": ("cmu_humanoid-moving-target", {**_HEADLINE, "progress_weight": 5.0}),
           "humanoid-alive": ("cmu_humanoid-moving-target", {**_HEADLINE, "alive_bonus": 1.0}),
           "humanoid-shaped": ("cmu_humanoid-moving-target", {**_HEADLINE, "progress_weight": 5.0, "alive_bonus": 0.2}),
           "humanoid-speed": ("cmu_humanoid-target-speed", {})}
_CONTROL_TIMESTEP = {"jumping_ball": 0.025, "ant": 0.05, "cmu_humanoid": 0.03}
_CAMERA = {"jumping_ball": "walker/tracking", "ant": "walker/floating", "cmu_humanoid": "walker/back"}
PHYSICS_TIMESTEP = 0.005
ARENA_SIZE = 8.0               # side of the square floor (dm_control Floor default) in which things are placed
TOLERANCE = 1.0                # planar distance that counts as reaching a target (dm_control GoToTarget default)
MIN_TARGET_DISTANCE = 2.0
MAX_TARGETS = 8                # 8 targets 2 m apart fit the 8 m square in practice (300 resets tried)
TARGET_SPEED = 3.0             # §7.7.1: v_t = 3
HEAD_HEIGHT_LIMIT = 0.95       # §7.7.1: humanoid terminates when the head drops below 0.95
GOAL_REWARD = 60.0             # §7.7.1 go to one of K targets
STEPS_BEFORE_RESPAWN = 10      # §7.7.1 moving target
SPEED_RANGE = {"jumping_ball": (0.0, 3.0), "ant": (0.0, 3.0), "cmu_humanoid": (0.0, 4.0)}  # target-speed, m/s
SPEED_SIGMA = 1.0 / np.sqrt(2.0)  # target-speed reward width: exp(-(v - v*)^2), the walk reward's kernel
SPEED_CHANGE_MEAN = 5.0           # target-speed: mean seconds between redraws of v*
STARTS = ("stand", "mocap")   # the walker's start: its upright default pose, or a frame of the shipped CMU snippets
DIRECTIONS = {"forward": (1.0, 0.0), "backward": (-1.0, 0.0), "left": (0.0, 1.0), "right": (0.0, -1.0)}

# The jumping ball has slide root joints, so dm_control's upright initializer warns on every reset that it cannot
# zero a free joint's velocity; the velocity is zero anyway (reset_context resets the whole state).
logging.getLogger("absl").addFilter(lambda record: "Cannot set velocity on Entity" not in record.getMessage())


def names() -> list[str]:
    return [f"{w}-{t}" for w in WALKERS for t in (*TASKS, *EXTRA_TASKS, "multitask")] + list(ALIASES)


def make(name: str, seed: int | None = None, action_repeat: int = 1, num_targets: int = 2,
         render_size: tuple[int, int] = (240, 320), fall_termination: bool | None = None,
         start: str | None = None, progress_weight: float | None = None, alive_bonus: float | None = None,
         start_snippet: str | None = None, ref_path: str | None = None, **unknown) -> "LocomotionEnv":
    if unknown:
        raise EnvError(f"{name}: unknown option(s) {', '.join(sorted(unknown))} (locomotion tasks take "
                       "num_targets, fall_termination, start, start_snippet, ref_path, progress_weight, alive_bonus "
                       "and render_size)")
    if name in ALIASES:
        name, options = ALIASES[name]
        fall_termination = options.get("fall_termination", fall_termination)
        start = start or options.get("start")
        progress_weight = options.get("progress_weight") if progress_weight is None else progress_weight
        alive_bonus = options.get("alive_bonus") if alive_bonus is None else alive_bonus
    walker, _, task = name.partition("-")
    if walker not in WALKERS or task not in (*TASKS, *EXTRA_TASKS, "multitask"):
        raise EnvError(f"unknown locomotion task {name!r}; names are {', '.join(names())}")
    start = start or "stand"
    if start not in STARTS or (start == "mocap" and walker != "cmu_humanoid"):
        raise EnvError(f"start must be one of {', '.join(STARTS)} ('mocap' on cmu_humanoid only), got {start!r}")
    if (start_snippet is not None or ref_path is not None) and start != "mocap":
        raise EnvError("start_snippet and ref_path choose the motion-capture start: they need start='mocap'")
    if not isinstance(num_targets, int) or not 1 <= num_targets <= MAX_TARGETS:
        raise EnvError(f"num_targets must be an integer in [1, {MAX_TARGETS}] (targets are kept "
                       f"{MIN_TARGET_DISTANCE} m apart in the {ARENA_SIZE} m arena), got {num_targets!r}")
    shaping = {"progress_weight": 0.0 if progress_weight is None else progress_weight,
               "alive_bonus": 0.0 if alive_bonus is None else alive_bonus}
    for key, value in shaping.items():
        if not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
            raise EnvError(f"{key} must be a finite number >= 0, got {value!r}")
        if value and task != "moving-target":
            raise EnvError(f"{key} applies to the moving-target task only, not {task!r}")
    tasks = TASKS if task == "multitask" else (task,)
    return LocomotionEnv(walker, tasks, num_targets=num_targets, seed=seed, action_repeat=action_repeat,
                         render_size=render_size, fall_termination=fall_termination, start=start,
                         start_snippet=start_snippet, ref_path=ref_path,
                         **{k: float(v) for k, v in shaping.items()})


def walk_reward(velocity: np.ndarray, target_velocity: np.ndarray) -> float:
    """§7.7.1: r = exp(-|v - v_t|^2)."""
    return float(np.exp(-np.sum((np.asarray(velocity) - np.asarray(target_velocity)) ** 2)))


def target_speed_reward(speed: float, target_speed: float, sigma: float = SPEED_SIGMA) -> float:
    """§8.4 (iii): a Gaussian reward centred at the target speed, r = exp(-(v - v*)^2 / (2 sigma^2))."""
    return float(np.exp(-(speed - target_speed) ** 2 / (2.0 * sigma ** 2)))


def relabelled_features(root_pose: np.ndarray, goal: np.ndarray) -> np.ndarray:
    """The moving-target task's features (the target's position in the walker's egocentric frame, as
    ``transform_vec_to_egocentric_frame`` gives them) had the target been at ``goal`` (xyz, world), for a walker at
    ``root_pose`` (``LocomotionTask.root_pose``): hindsight relabelling (agents/hindsight.py)."""
    pose = np.asarray(root_pose, np.float64)
    return ((np.asarray(goal, np.float64) - pose[:3]) @ pose[3:12].reshape(3, 3)).astype(np.float32)


def target_of_features(root_pose: np.ndarray, features: np.ndarray) -> np.ndarray:
    """The inverse of ``relabelled_features``: the target's world position (xyz) from the features a walker at
    ``root_pose`` saw."""
    pose = np.asarray(root_pose, np.float64)
    return pose[:3] + pose[3:12].reshape(3, 3) @ np.asarray(features, np.float64)[:3]


def steps_on_target(root_positions: np.ndarray, goal: np.ndarray) -> np.ndarray:
    """Per step, whether the walker's root (rows of world xyz) was within ``TOLERANCE`` of ``goal`` in the plane: the
    moving-target task's reward of 1."""
    positions = np.asarray(root_positions, np.float64).reshape(-1, 3)
    return np.linalg.norm(positions[:, :2] - np.asarray(goal, np.float64)[:2], axis=1) < TOLERANCE


# -- objectives: the logic of one task, on a walker and arena shared with the others ------------------------------
class Objective:
    """One task. ``after_step`` sets ``reward`` and ``terminated`` for the step just taken."""

    name: str
    time_limit: float
    feature_size: int
    ends_on_fall = False  # whether a fall of the humanoid ends this task's episodes (by default)

    def __init__(self):
        self.reward, self.terminated = 0.0, False

    def add_to(self, arena) -> None:
        """Add this task's (non-colliding) sites to the arena's model."""

    def initialize_episode(self, task: "LocomotionTask", physics, random_state) -> None:
        self.reward, self.terminated = 0.0, False

    def after_step(self, task: "LocomotionTask", physics, random_state) -> None:
        raise NotImplementedError

    def features(self, task: "LocomotionTask", physics) -> np.ndarray:
        raise NotImplementedError

    def show(self, physics, visible: bool) -> None:
        """Show or hide this task's sites (rendering only; sites never touch the physics)."""

    def episode_metrics(self) -> dict[str, float]:
        """Statistics of the episode so far, reported on its last step (``info["episode_metrics"]``)."""
        return {}

    # the attributes an episode in progress changes (target sites live in the model, which DMEnv captures)
    episode_fields: tuple[str, ...] = ("reward", "terminated")

    def get_state(self) -> dict:
        return {name: getattr(self, name) for name in self.episode_fields}

    def set_state(self, state: dict) -> None:
        for name in self.episode_fields:
            setattr(self, name, state[name])


class Walk(Objective):
    name, time_limit, feature_size = "walk", 10.0, 4 + 3
    ends_on_fall = True  # §7.7.1
    episode_fields = (*Objective.episode_fields, "direction", "_resampled")

    def __init__(self):
        super().__init__()
        self.direction = 0
        self._resampled = False

    def _sample_direction(self, random_state) -> None:
        self.direction = int(random_state.randint(len(DIRECTIONS)))

    def target_velocity(self) -> np.ndarray:
        return TARGET_SPEED * np.asarray(list(DIRECTIONS.values())[self.direction])

    def initialize_episode(self, task, physics, random_state):
        super().initialize_episode(task, physics, random_state)
        self._sample_direction(random_state)
        self._resampled = False

    def after_step(self, task, physics, random_state):
        if not self._resampled and physics.time() >= self.time_limit / 2 - PHYSICS_TIMESTEP / 2:
            self._sample_direction(random_state)  # §7.7.1: "and half-way through an episode"
            self._resampled = True
        self.reward = walk_reward(task.planar_velocity(physics), self.target_velocity())

    def features(self, task, physics):
        one_hot = np.eye(len(DIRECTIONS))[self.direction]
        target = task.walker.transform_vec_to_egocentric_frame(physics, np.append(self.target_velocity(), 0.0))
        return np.concatenate([one_hot, target])


class _Targets(Objective):
    """Tasks with target sites: their positions live in the model (``site_pos``), which rendering shows too."""

    colours = ((0.9, 0.2, 0.2, 1.0),)

    def __init__(self, count: int):
        super().__init__()
        self.count = count
        self.sites = []

    def add_to(self, arena):
        self.sites = [arena.mjcf_model.worldbody.add("site", name=f"{self.name}_{i}", type="sphere", size=(0.3,),
                                                     pos=(0.0, 0.0, 0.0), rgba=self.colours[0], group=0)
                      for i in range(self.count)]

    def positions(self, physics) -> np.ndarray:
        return np.array(physics.bind(self.sites).pos)

    def set_position(self, physics, index: int, xy) -> None:
        physics.bind(self.sites[index]).pos = [xy[0], xy[1], 0.0]

    def relative(self, task, physics, positions: np.ndarray) -> np.ndarray:
        """Positions relative to the walker's root, in its egocentric frame."""
        return task.walker.transform_vec_to_egocentric_frame(physics, positions - task.root_position(physics))

    def on_target(self, task, physics, index: int) -> bool:
        return bool(steps_on_target(task.root_position(physics), self.positions(physics)[index])[0])

    def show(self, physics, visible):
        physics.bind(self.sites).rgba[:, 3] = float(visible)


class GoToTarget(_Targets):
    name, time_limit = "go-to-target", 20.0
    colours = ((0.9, 0.2, 0.2, 1.0), (0.3, 0.4, 0.9, 1.0))  # goal, others (for videos; not observed)

    def __init__(self, num_targets: int = 2):
        super().__init__(num_targets)
        self.feature_size = 3 + 3 * num_targets
        self.goal = 0

    episode_fields = (*Objective.episode_fields, "goal")

    def initialize_episode(self, task, physics, random_state):
        super().initialize_episode(task, physics, random_state)
        taken = [task.root_position(physics)[:2]]
        for i in range(self.count):
            xy = task.sample_position(random_state, away_from=taken)
            self.set_position(physics, i, xy)
            taken.append(xy)
        self.goal = int(random_state.randint(self.count))
        physics.bind(self.sites).rgba = [self.colours[0] if i == self.goal else self.colours[1]
                                         for i in range(self.count)]

    def after_step(self, task, physics, random_state):
        self.terminated = self.on_target(task, physics, self.goal)
        self.reward = GOAL_REWARD if self.terminated else 0.0

    def features(self, task, physics):
        relative = self.relative(task, physics, self.positions(physics))
        return np.concatenate([relative[self.goal], relative.ravel()])


class MovingTarget(_Targets):
    """r = 1 on each step within 1 m of the target, plus, with ``progress_weight`` w > 0, w times the metres the
    step brought the walker closer to the target it was heading for (negative when it moved away). That term is
    not the thesis's (its reward is sparse); it telescopes to w (d_start - d_end) per target, so it rewards
    approaching without paying for loitering, and a respawned target starts a new distance rather than a penalty.
    ``alive_bonus`` b > 0 adds b on every step, the step of a fall included (where falls end the episode, b times
    the episode's length). Under fall termination the fall's own step still earns its progress: falling towards the
    target is paid, and only the lost future costs."""

    name, time_limit, feature_size = "moving-target", 25.0, 3
    episode_fields = (*Objective.episode_fields, "steps_on_target", "targets_reached", "distance")

    def __init__(self, progress_weight: float = 0.0, alive_bonus: float = 0.0):
        super().__init__(1)
        self.progress_weight, self.alive_bonus = progress_weight, alive_bonus
        self.steps_on_target = self.targets_reached = 0
        self.distance: float | None = 0.0   # planar distance to the target after the last step (or the reset)

    def set_state(self, state: dict) -> None:
        # episodes captured before the progress term (older checkpoints) lack the distance: the step after such a
        # restore earns no progress
        super().set_state({"distance": None, **state})

    def planar_distance(self, task, physics) -> float:
        return float(np.linalg.norm(self.positions(physics)[0, :2] - task.root_position(physics)[:2]))

    def _respawn(self, task, physics, random_state):
        self.set_position(physics, 0, task.sample_position(random_state, away_from=[task.root_position(physics)]))
        self.steps_on_target = 0

    def initialize_episode(self, task, physics, random_state):
        super().initialize_episode(task, physics, random_state)
        self._respawn(task, physics, random_state)
        self.targets_reached = 0
        self.distance = self.planar_distance(task, physics)

    def after_step(self, task, physics, random_state):
        on = self.on_target(task, physics, 0)
        distance = self.planar_distance(task, physics)
        progress = 0.0 if self.distance is None else self.distance - distance
        self.reward = (1.0 if on else 0.0) + self.progress_weight * progress + self.alive_bonus
        self.steps_on_target = self.steps_on_target + 1 if on else 0
        if self.steps_on_target >= STEPS_BEFORE_RESPAWN:
            # before the observation is taken, so the agent sees the new target on the step that moved it
            self.targets_reached += 1
            self._respawn(task, physics, random_state)
            distance = self.planar_distance(task, physics)
        self.distance = distance

    def episode_metrics(self):
        """Targets reached (held for 10 steps, so that the target moved on) in the episode: what a user watches."""
        return {"task/targets_reached": float(self.targets_reached)}

    def features(self, task, physics):
        return self.relative(task, physics, self.positions(physics))[0]


class TargetSpeed(Objective):
    """§8.4 (iii): track a randomly changing target speed (module docstring)."""

    name, time_limit, feature_size = "target-speed", 20.0, 1
    ends_on_fall = True
    episode_fields = (*Objective.episode_fields, "target_speed", "errors")

    def __init__(self, speed_range: tuple[float, float], change_probability: float):
        super().__init__()
        self.speed_range, self.change_probability = speed_range, change_probability
        self.target_speed = 0.0
        self.errors: list[float] = []

    def _draw(self, random_state) -> None:
        self.target_speed = float(random_state.uniform(*self.speed_range))

    def initialize_episode(self, task, physics, random_state):
        super().initialize_episode(task, physics, random_state)
        self._draw(random_state)
        self.errors = []

    def after_step(self, task, physics, random_state):
        speed = float(np.linalg.norm(task.planar_velocity(physics)))
        self.reward = target_speed_reward(speed, self.target_speed)
        self.errors.append(abs(speed - self.target_speed))
        if random_state.uniform() < self.change_probability:
            self._draw(random_state)  # before the observation: the policy sees the new target at once

    def features(self, task, physics):
        return np.array([self.target_speed])

    def episode_metrics(self):
        return {"task/speed_error": float(np.mean(self.errors))} if self.errors else {}


# -- the composer task: one walker on a floor, one of the objectives per episode -----------------------------------
class LocomotionTask(composer.Task):
    """A walker on a ``Floor``; each episode runs one objective (drawn uniformly when there are several)."""

    def __init__(self, walker, arena, objectives: list[Objective], control_timestep: float, head=None,
                 fall_termination: bool | None = None, starts=None):
        self.walker, self._arena, self.objectives = walker, arena, objectives
        # envs.mocap.tracking.MocapStarts to start from motion-capture frames; None: the walker's default pose
        self.starts = starts
        # the body whose height below HEAD_HEIGHT_LIMIT is a fall (humanoid only); None: the walker cannot fall
        self.head, self.fall_termination = head, fall_termination
        self.terminated = self.fell = False
        walker.create_root_joints(arena.attach(walker))
        for obs in (walker.observables.proprioception + walker.observables.kinematic_sensors
                    + walker.observables.dynamic_sensors + [walker.observables.sensors_touch]):
            obs.enabled = True
        for objective in objectives:
            objective.add_to(arena)
        self.active = 0
        self._timed_out = False
        self._feature_size = max(o.feature_size for o in objectives)
        multitask = len(objectives) > 1
        self._task_observables = {"task": observable.Generic(lambda physics: self._task_features(physics,
                                                                                                multitask))}
        self._task_observables["task"].enabled = True
        self.set_timesteps(physics_timestep=PHYSICS_TIMESTEP, control_timestep=control_timestep)

    @property
    def root_entity(self):
        return self._arena

    @property
    def task_observables(self):
        return self._task_observables

    @property
    def objective(self) -> Objective:
        return self.objectives[self.active]

    @property
    def ends_on_fall(self) -> bool:
        """Whether a fall ends the episode's task (``fall_termination`` overrides the task's own rule)."""
        if self.head is None:
            return False
        return self.objective.ends_on_fall if self.fall_termination is None else self.fall_termination

    def _task_features(self, physics, multitask: bool) -> np.ndarray:
        padded = np.zeros(self._feature_size)
        features = self.objective.features(self, physics)
        padded[:features.size] = features
        if not multitask:
            return padded
        return np.concatenate([np.eye(len(self.objectives))[self.active], padded])

    # helpers the objectives use
    def root_position(self, physics) -> np.ndarray:
        return np.array(physics.bind(self.walker.root_body).xpos)

    def root_pose(self, physics) -> np.ndarray:
        """(12,): the root body's world position and its rotation matrix (row-major), the frame of the egocentric
        task features."""
        root = physics.bind(self.walker.root_body)
        return np.concatenate([root.xpos, root.xmat]).astype(np.float32)

    def planar_velocity(self, physics) -> np.ndarray:
        """World-frame xy velocity of the walker's root body."""
        velocity = np.zeros(6)  # (angular, linear), world orientation, at the body's origin
        mujoco.mj_objectVelocity(physics.model.ptr, physics.data.ptr, mujoco.mjtObj.mjOBJ_BODY,
                                 physics.bind(self.walker.root_body).element_id, velocity, 0)
        return velocity[3:5]

    def sample_position(self, random_state, away_from=()) -> np.ndarray:
        """Uniform in the arena square, at least MIN_TARGET_DISTANCE from each point of ``away_from``."""
        for _ in range(1000):
            xy = random_state.uniform(-ARENA_SIZE / 2, ARENA_SIZE / 2, size=2)
            if all(np.linalg.norm(xy - np.asarray(p)[:2]) >= MIN_TARGET_DISTANCE for p in away_from):
                return xy
        raise RuntimeError("cannot place a target: the arena is too crowded")

    # composer hooks
    def initialize_episode(self, physics, random_state):
        self.active = int(random_state.randint(len(self.objectives)))
        if self.starts is None:
            self.walker.reinitialize_pose(physics, random_state)
        else:
            self.starts.place(physics, self.walker, random_state)
        yaw = random_state.uniform(-np.pi, np.pi)
        xy = random_state.uniform(-ARENA_SIZE / 2, ARENA_SIZE / 2, size=2)
        self.walker.shift_pose(physics, position=[xy[0], xy[1], 0.0],
                               quaternion=[np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)], rotate_velocity=True)
        for i, objective in enumerate(self.objectives):
            objective.show(physics, i == self.active)
        self._timed_out = self.terminated = self.fell = False
        self.objective.initialize_episode(self, physics, random_state)

    def before_step(self, physics, action, random_state):
        self.walker.apply_action(physics, action, random_state)

    def after_step(self, physics, random_state):
        self.objective.after_step(self, physics, random_state)
        self.fell = self.ends_on_fall and physics.bind(self.head).xpos[2] < HEAD_HEIGHT_LIMIT
        self.terminated = self.objective.terminated or self.fell
        # a float-safe time limit (time accumulates in physics timesteps)
        self._timed_out = physics.time() >= self.objective.time_limit - PHYSICS_TIMESTEP / 2

    def get_state(self) -> dict:
        """The episode in progress beyond the physics (envs/dmc.py captures that): which objective, its state."""
        return {"active": self.active, "terminated": self.terminated, "fell": self.fell,
                "timed_out": self._timed_out, "objective": self.objective.get_state()}

    def set_state(self, state: dict) -> None:
        self.active = int(state["active"])
        self.terminated, self.fell, self._timed_out = state["terminated"], state["fell"], state["timed_out"]
        self.objective.set_state(state["objective"])

    def get_reward(self, physics):
        return self.objective.reward

    def get_discount(self, physics):
        return 0.0 if self.terminated else 1.0

    def should_terminate_episode(self, physics):
        return self.terminated or self._timed_out



def build_walker(walker: str):
    from dm_control.locomotion.walkers import ant, cmu_humanoid, jumping_ball

    return {"jumping_ball": jumping_ball.JumpingBallWithHead, "ant": ant.Ant,
            "cmu_humanoid": cmu_humanoid.CMUHumanoidPositionControlledV2020}[walker]()


def build_task(walker_name: str, tasks: tuple[str, ...], num_targets: int = 2, fall_termination: bool | None = None,
               start: str = "stand", progress_weight: float = 0.0, alive_bonus: float = 0.0,
               start_snippet: str | None = None, ref_path: str | None = None):
    from dm_control.locomotion.arenas import floors

    walker = build_walker(walker_name)
    head = walker.mjcf_model.find("body", "head") if walker_name == "cmu_humanoid" else None
    timestep = _CONTROL_TIMESTEP[walker_name]
    objectives = {"walk": Walk, "go-to-target": lambda: GoToTarget(num_targets),
                  "moving-target": lambda: MovingTarget(progress_weight, alive_bonus),
                  "target-speed": lambda: TargetSpeed(SPEED_RANGE[walker_name], timestep / SPEED_CHANGE_MEAN)}
    starts = None
    if start == "mocap":
        from envs.mocap.tracking import MocapStarts  # here: other tasks build where the mocap data cannot load

        starts = MocapStarts(**({"ref_path": ref_path} if ref_path is not None else {}), snippet=start_snippet)
    return LocomotionTask(walker, floors.Floor(size=(ARENA_SIZE, ARENA_SIZE)), [objectives[t]() for t in tasks],
                          timestep, head=head, fall_termination=fall_termination, starts=starts)


class LocomotionEnv(DMEnv):
    """A locomotion task as a Gymnasium env (the ``DMEnv`` interface); ``info["task"]`` names the episode's task
    in multitask envs; ``info["fell"]`` is present where falls end episodes and True on the step of the fall;
    ``info["episode_metrics"]`` holds the task's episode statistics on the episode's last step. ``task`` is the
    composer task (its ``objective`` is the episode's task)."""

    def __init__(self, walker: str, tasks: tuple[str, ...], num_targets: int = 2, seed: int | None = None,
                 action_repeat: int = 1, render_size: tuple[int, int] = (240, 320),
                 fall_termination: bool | None = None, start: str = "stand", progress_weight: float = 0.0,
                 alive_bonus: float = 0.0, start_snippet: str | None = None, ref_path: str | None = None):
        self.task = build_task(walker, tasks, num_targets, fall_termination, start, progress_weight, alive_bonus,
                               start_snippet, ref_path)
        self._multitask = len(tasks) > 1

        def load(env_seed: int):
            # no recompiling per episode: targets move through the physics model, not the MJCF
            return composer.Environment(self.task, random_state=env_seed, strip_singleton_obs_buffer_dim=True,
                                           recompile_mjcf_every_episode=False)

        super().__init__(load, seed=seed, action_repeat=action_repeat, render_size=render_size,
                         group_of=lambda key: "proprio" if key.startswith("walker/") else "task",
                         camera_id=_CAMERA[walker])

    def _reseed(self, env_seed: int) -> None:
        self._env.random_state.seed(env_seed)  # in place: rebuilding a composer env costs a model compile

    def task_state(self) -> dict:
        return self.task.get_state()

    def set_task_state(self, state: dict) -> None:
        self.task.set_state(state)

    def _info(self) -> dict:
        info = {"task": self.task.objective.name} if self._multitask else {}
        # where the walker is and how it is turned: what hindsight relabelling needs (``relabelled_features``)
        info["root_pose"] = self.task.root_pose(self._env.physics)
        if self.task.ends_on_fall:
            info["fell"] = bool(self.task.fell)
        if self.task.terminated or self.task._timed_out:
            info["episode_metrics"] = self.task.objective.episode_metrics()
        return info
