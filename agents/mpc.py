"""Tracking motion capture by planning with the simulator: sampling-based MPC on MuJoCo's own physics.

Not in the seeds' learners: seed 000 §8.1 trains one RL expert per clip snippet (~10^9 steps each), which this
machine cannot give. Tracking a clip is a planning problem with a perfect model at hand -- MuJoCo itself -- as in
MuJoCo MPC's "Humanoid Track" task (predictive sampling / iLQG over a 0.6 s horizon). The NPMP pipeline uses these
planners as its experts; seed 000 eqs 8.4-8.9 only need an expert that can be queried at any visited state.

The controller (``TrackingPlanner``), at every control step t of a ``humanoid-track`` environment:
1. reads the simulator's full physics state (``mj_getState``, mjSTATE_FULLPHYSICS) -- never the observation;
2. commands, at each control step k of a ``horizon``, the feed-forward servo targets of the reference (the clip's
   joint angles of the next frame, envs/mocap/tracking.py ``feed_forward_actions``) plus servo feedback
   ``feedback_gain`` x (reference angle - joint angle) in command units, plus a correction that is linear between
   ``knots`` spline knots -- the plan is the knots;
3. samples ``candidates`` - 1 knot perturbations (Gaussian, std ``noise_std``) around the nominal knots and keeps the
   nominal itself (predictive sampling, Howell et al. 2022); ``method="cem"`` refits the nominal to the mean of the
   ``elites`` best over ``iterations`` rounds with a shrinking std (cross-entropy method, as hydrax);
4. rolls every candidate out from the current state with ``mujoco.rollout`` (the environment's own step, run on
   ``threads`` threads), one call per control step because the feedback reads each candidate's state;
5. scores each candidate by the CoMic tracking reward it would earn (``comic_reward``: the exact terms of the
   environment's reward, computed from the rolled-out states) summed over the horizon, where a step whose tracking
   error exceeds the environment's termination threshold earns nothing for the rest of the horizon; near the
   clip's end the horizon stops where the episode does;
6. executes the first command of the best plan and keeps the plan, shifted by one control step and scaled by
   ``warm_start_decay``, as the next nominal (warm start).
The defaults (CEM, 3 rounds of 32 candidates, feedback gain 2) were chosen by the tracking they gave on one walk
(07_01-0); a longer horizon than the 0.6 s of MuJoCo MPC on eight snippets, where 0.6 s left the walks falling at
the same points whatever the sample count; the warm start's decay of 0.97 on a walk looped to 10 s, where an
undecayed warm start let an arm drift until the walker fell; and the 1.8 s horizon with 4 knots (before: 1.2 s, 3
knots) on all 68 snippets, of which it tracks 65 to their end against 60 (docs/npmp.md has the tables). Quality on
every shipped snippet is measured by benchmarks/experts.py. ``feedback_jacobian`` gives the Jacobian of the executed command with the plan
held fixed, which the NPMP pipeline uses as LFPC's linear-feedback policy (seed 000 eqs 8.5-8.9).
"""
from __future__ import annotations

import dataclasses
import os
import time

import gymnasium as gym
import mujoco
import mujoco.rollout
import numpy as np
import torch

from agents.config import ConfigError
from agents.protocol import AgentBase
from agents.schedule import Schedule
from dm_control.locomotion.tasks.reference_pose.rewards import bounded_quat_dist

from envs import EnvError
from envs.mocap.tracking import TERMINATION_ERROR_THRESHOLD, servo_command

METHODS = ("ps", "cem")


# settings added after planner runs were kept (data/teachers): what those runs were planned with
SETTINGS_ADDED_SINCE = {"follow_walker": False, "follow_walker_slack": 0.0}


def stored_settings(settings: dict | None) -> dict | None:
    """MPCConfig settings as a collection stored them, with the settings added since at the value they had then."""
    return None if settings is None else {**SETTINGS_ADDED_SINCE, **settings}


@dataclasses.dataclass(frozen=True)
class MPCConfig:
    horizon: int = 60          # control steps planned ahead (x 0.03 s = 1.8 s; MuJoCo MPC's Humanoid Track plans
                               # 0.6 s, which left the walks falling at the same points: docs/npmp.md)
    knots: int = 4             # spline knots of the correction over the horizon
    candidates: int = 32       # rollouts per iteration, the nominal included
    noise_std: float = 0.1     # knot perturbation std, in servo-command units ([-1, 1] is the joint's range)
    iterations: int = 3        # sampling rounds per control step
    method: str = "cem"        # ps: keep the best; cem: refit to the elites' mean
    elites: int = 6            # cem only
    feedback_gain: float = 2.0  # commands add gain x (reference angle - joint angle), in servo-command units
    threads: int = 0           # rollout threads; 0: one per core
    root_position_weight: float = 0.0     # planner-only shaping: per metre of root position error ...
    root_orientation_weight: float = 0.0   # ... and per radian of root orientation error, per step
    joint_velocity_weight: float = 0.0     # planner-only shaping: per unit of the summed squared joint-velocity
                                           # error E, per step; the reward's own term exp(-0.1 E) is flat at the
                                           # planner's E of 100-250 (docs/npmp.md, "Where the reward goes")
    # compare positions with the reference moved over the ground so that its root at the current frame lies over the
    # walker's: a lag built up earlier is forgotten while the pace over the horizon is still asked. Without it a
    # walker ~1 m behind exceeds the termination error in every rollout, whose reward is then masked to zero, and
    # the planner goes blind for the rest of the clip (docs/npmp.md, "Teachers that lose the pace")
    follow_walker: bool = False
    # with follow_walker, metres of the walker's lag behind the reference kept rather than forgiven: a walker up to
    # this far behind is asked to catch up (each metre costs ~0.28 reward a step through the termination term), a
    # lag beyond it is forgiven (docs/npmp.md, "A planner on a leash")
    follow_walker_slack: float = 0.0
    warm_start_decay: float = 0.97  # the kept plan is scaled by this before it warm-starts the next step (a ~1 s
                                    # time constant); at 1 the joints the reward barely sees (an arm) random-walk
                                    # from plan to plan until the walker falls (docs/npmp.md, "A plan that forgets")
    seed: int = 0

    def validate(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        for name in ("horizon", "knots", "candidates", "iterations", "elites"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.knots > self.horizon:
            raise ConfigError(f"knots ({self.knots}) cannot exceed horizon ({self.horizon})")
        if not (self.noise_std >= 0 and self.feedback_gain >= 0):
            raise ConfigError(f"noise_std and feedback_gain must be >= 0, got {self.noise_std}, {self.feedback_gain}")
        if not (self.root_position_weight >= 0 and self.root_orientation_weight >= 0
                and self.joint_velocity_weight >= 0):
            raise ConfigError("root_position_weight, root_orientation_weight and joint_velocity_weight must be >= 0")
        if not self.follow_walker_slack >= 0:
            raise ConfigError(f"follow_walker_slack must be >= 0, got {self.follow_walker_slack}")
        if not 0 <= self.warm_start_decay <= 1:
            raise ConfigError(f"warm_start_decay must be in [0, 1], got {self.warm_start_decay}")
        if self.threads < 0:
            raise ConfigError(f"threads must be >= 0, got {self.threads}")
        if self.method == "cem" and self.elites >= self.candidates:
            raise ConfigError(f"elites ({self.elites}) must be fewer than candidates ({self.candidates})")


def interpolation_matrix(horizon: int, knots: int, shift: float = 0.0) -> np.ndarray:
    """[horizon, knots] weights of a piecewise-linear spline through ``knots`` evenly spaced knots over the horizon,
    evaluated at control steps k + shift (held constant beyond the last knot)."""
    if knots == 1:
        return np.ones((horizon, 1))
    at = np.clip(np.arange(horizon) + shift, 0, horizon - 1) * (knots - 1) / max(horizon - 1, 1)
    weights = np.zeros((horizon, knots))
    left = np.minimum(np.floor(at).astype(int), knots - 2)
    frac = at - left
    weights[np.arange(horizon), left] = 1 - frac
    weights[np.arange(horizon), left + 1] = frac
    return weights


def bounded_quat_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """dm_control's reference_pose.rewards.bounded_quat_dist (which normalises its arguments in place, hence the
    copies) without its trailing axis."""
    return bounded_quat_dist(np.array(a, np.float64), np.array(b, np.float64))[..., 0]


# each CoMic term's weight in the reward: what a perfect tracker earns of it per step (1.45 in all)
COMIC_WEIGHTS = {"termination": 0.5, "center_of_mass": 0.05, "joints_velocity": 0.5, "appendages": 0.075,
                 "body_quaternions": 0.325}
COMIC_TERMS = tuple(COMIC_WEIGHTS)
JOINTS_VELOCITY_SCALE = 0.1   # the joint-velocity term is exp(-JOINTS_VELOCITY_SCALE * E) (dm_control's comic reward)


def comic_terms(features: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray],
                                                                                             np.ndarray]:
    """(the CoMic reward's terms, each weighted as it enters the reward so that they sum to it; termination error)
    for batched walker features [..., ...] against reference features of the same shape (dm_control
    reference_pose.rewards.comic_reward_fn and tracking.MultiClipMocapTracking._compute_termination_error,
    batched). Also returns ``joints_velocity_error``: the summed squared joint-velocity error E of the term
    exp(-0.1 E)."""
    joints_error = np.mean(np.abs(features["joints"] - reference["joints"]), axis=-1)
    bodies_error = np.mean(np.abs(features["body_positions"] - reference["body_positions"]), axis=(-2, -1))
    error = 0.5 * bodies_error + 0.5 * joints_error

    def squared(key, axes):
        return np.sum((features[key] - reference[key]) ** 2, axis=axes)
    velocity_error = squared("joints_velocity", -1)
    quats = bounded_quat_distance(features["body_quaternions"], reference["body_quaternions"])
    closeness = {"termination": 1.0 - error / TERMINATION_ERROR_THRESHOLD,
                 "center_of_mass": np.exp(-10.0 * squared("center_of_mass", -1)),
                 "joints_velocity": np.exp(-JOINTS_VELOCITY_SCALE * velocity_error),
                 "appendages": np.exp(-40.0 * squared("appendages", (-2, -1))),
                 "body_quaternions": np.exp(-2.0 * np.sum(quats ** 2, axis=-1))}
    terms = {name: COMIC_WEIGHTS[name] * value for name, value in closeness.items()}
    return {**terms, "joints_velocity_error": velocity_error}, error


def comic_reward(features: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(reward, termination error) of envs/mocap/tracking.py's CoMic reward (``comic_terms`` summed)."""
    terms, error = comic_terms(features, reference)
    return sum(terms[name] for name in COMIC_TERMS), error


class WalkerFeatures:
    """dm_control's reference_pose.utils.get_features (the quantities the CoMic reward compares) for many
    physics states at once: kinematics on a scratch MjData per state. Index arrays come from the walker's bindings,
    so the features line up with the reference's."""

    def __init__(self, physics, walker):
        self.model = physics.model.ptr
        self.data = mujoco.MjData(self.model)
        bind = physics.bind
        self.joint_qpos = np.asarray(bind(walker.mocap_joints).qposadr).ravel()
        self.joint_dof = np.asarray(bind(walker.mocap_joints).dofadr).ravel()
        self.bodies = np.asarray(bind(walker.mocap_tracking_bodies).element_id)
        self.root = int(bind(walker.root_body).element_id)
        self.appendages = np.asarray(bind(tuple(walker.end_effectors) + (walker.head,)).element_id)

    def __call__(self, qpos: np.ndarray, qvel: np.ndarray) -> dict[str, np.ndarray]:
        """Features of states qpos [N, nq], qvel [N, nv]."""
        n = len(qpos)
        out = {"joints": qpos[:, self.joint_qpos], "joints_velocity": qvel[:, self.joint_dof],
               "position": np.empty((n, 3)), "quaternion": np.empty((n, 4)),
               "body_positions": np.empty((n, len(self.bodies), 3)),
               "body_quaternions": np.empty((n, len(self.bodies), 4)),
               "center_of_mass": np.empty((n, 3)), "appendages": np.empty((n, len(self.appendages), 3))}
        model, data = self.model, self.data
        for i in range(n):
            data.qpos[:] = qpos[i]
            mujoco.mj_kinematics(model, data)
            mujoco.mj_comPos(model, data)
            out["body_positions"][i] = data.xpos[self.bodies]
            out["body_quaternions"][i] = data.xquat[self.bodies]
            out["center_of_mass"][i] = data.subtree_com[self.root]
            out["position"][i], out["quaternion"][i] = data.xpos[self.root], data.xquat[self.root]
            out["appendages"][i] = (data.xpos[self.appendages] - data.xpos[self.root]) @ \
                data.xmat[self.root].reshape(3, 3)
        return out


REFERENCE_KEYS = ("joints", "joints_velocity", "body_positions", "body_quaternions", "center_of_mass",
                  "appendages", "position", "quaternion")


@dataclasses.dataclass
class PlanInfo:
    predicted_return: float     # the chosen plan's summed CoMic reward over the horizon
    nominal_return: float       # the warm-started nominal's (before sampling)
    seconds: float              # wall time of this control step's planning
    horizon: int                # control steps planned (fewer than the config's near the clip's end)


class TrackingPlanner:
    """Sampling MPC for one ``humanoid-track`` environment (envs/mocap/tracking.py ``TrackingEnv``).

    ``act()`` plans from the environment's current simulator state and returns the walker's command (what
    ``env.step`` takes; the tracking env's actions are the servo commands in [-1, 1]). ``reset()`` forgets the
    warm start (call it at every episode start)."""

    def __init__(self, env, config: MPCConfig = MPCConfig()):
        config.validate()
        self.env, self.config = env, config
        physics = env.physics   # read again at every step: a reset with a seed rebuilds the environment
        self.model = physics.model.ptr
        self.substeps = int(round(env.control_timestep / self.model.opt.timestep))
        self.features = WalkerFeatures(physics, env.walker)
        self.actuators = np.asarray(physics.bind(env.walker.actuators).element_id)
        joints = [actuator.joint for actuator in env.walker.actuators]
        self.actuator_qpos = 1 + np.asarray(physics.bind(joints).qposadr).ravel()   # in the full state
        self.joint_low, self.joint_high = np.asarray(physics.bind(joints).range).T
        # where each actuator's joint angle lies in the proprio observation (feedback_jacobian's columns)
        slices = env.observation_slices("proprio")
        observed = [joint.name for joint in env.walker.observable_joints]
        self._joint_columns = (max(s.stop for s in slices.values()), slices["walker/joints_pos"].start
                               + np.array([observed.index(joint.name) for joint in joints]))

        self.rng = np.random.default_rng(config.seed)
        self.threads = config.threads or os.cpu_count() or 1
        self.pool = mujoco.rollout.Rollout(nthread=self.threads if self.threads > 1 else 0)
        self.datas = [mujoco.MjData(self.model) for _ in range(self.threads)]
        self.weights = interpolation_matrix(config.horizon, config.knots)
        shifted = interpolation_matrix(config.horizon, config.knots, shift=1.0)
        self.shift = np.linalg.pinv(self.weights) @ shifted   # knots -> knots of the plan one step later
        self.nominal = np.zeros((config.knots, len(self.actuators)))
        self.last_info: PlanInfo | None = None

    def reset(self) -> None:
        self.nominal[:] = 0.0

    def close(self) -> None:
        self.pool.close()

    def _reference(self, frames: np.ndarray) -> dict[str, np.ndarray]:
        reference = self.env.clip_reference()
        return {k: reference[k][frames] for k in REFERENCE_KEYS}

    # the reference features given in world coordinates (the rest are egocentric or joint-space)
    WORLD_KEYS = ("position", "center_of_mass", "body_positions")

    def _moved_over_walker(self, reference: dict[str, np.ndarray], state: np.ndarray, t: int) -> dict[str, np.ndarray]:
        """``reference`` with its world positions shifted over the ground by the walker's root (full state
        ``state``) minus the reference's root at frame ``t`` (``MPCConfig.follow_walker``), less
        ``follow_walker_slack`` metres of that distance (the lag the walker is still asked to make up)."""
        offset = np.zeros(3)
        offset[:2] = state[1:3] - self.env.clip_reference()["position"][t][:2]   # state: time, then qpos
        distance = float(np.linalg.norm(offset))
        if distance > 0:
            offset *= max(0.0, 1.0 - self.config.follow_walker_slack / distance)
        return {k: v + offset if k in self.WORLD_KEYS else v for k, v in reference.items()}

    def _score(self, states: np.ndarray, reference: dict[str, np.ndarray]) -> np.ndarray:
        """Summed CoMic reward over the horizon of rolled-out states [N, horizon, state]; zero after the first
        step whose tracking error would terminate the episode."""
        n, horizon = states.shape[:2]
        flat = states.reshape(n * horizon, -1)
        qpos = flat[:, 1:1 + self.model.nq]          # mjSTATE_FULLPHYSICS = time, qpos, qvel, act, ...
        qvel = flat[:, 1 + self.model.nq:1 + self.model.nq + self.model.nv]
        features = {k: v.reshape(n, horizon, *v.shape[1:]) for k, v in self.features(qpos, qvel).items()}
        reference = {k: v[None] for k, v in reference.items()}
        terms, error = comic_terms(features, reference)
        reward = sum(terms[name] for name in COMIC_TERMS)
        cfg = self.config
        shaping = cfg.root_position_weight * np.linalg.norm(features["position"] - reference["position"], axis=-1) \
            + cfg.root_orientation_weight * 2.0 * bounded_quat_distance(features["quaternion"], reference["quaternion"]) \
            + cfg.joint_velocity_weight * terms["joints_velocity_error"]
        alive = np.cumprod(error <= TERMINATION_ERROR_THRESHOLD, axis=1)
        return np.sum(reward * alive - shaping, axis=1)

    def reward_terms(self) -> dict[str, float]:
        """The CoMic reward's terms (``comic_terms``) that the environment's current state earns against the
        reference frame it is compared with, i.e. what the last ``env.step`` was rewarded, term by term."""
        data = self.env.physics.data
        features = self.features(np.array(data.qpos)[None], np.array(data.qvel)[None])
        terms, _ = comic_terms(features, self._reference(np.array([self.env.time_step])))
        return {name: float(value[0]) for name, value in terms.items()}

    def _servo_commands(self, states: np.ndarray) -> np.ndarray:
        """The servo commands that would hold each actuated joint where it is, for full states [N, state]."""
        return servo_command(states[:, self.actuator_qpos], self.joint_low, self.joint_high)

    def feedback_jacobian(self, command: np.ndarray) -> np.ndarray:
        """d command / d proprio [actuators, proprio size]: the executed control law's derivative at the current step
        with the plan held fixed -- the servo feedback on each actuator's own joint angle (the ``joints_pos``
        observation), zero where the command is clipped. It leaves out how replanning would respond to the state."""
        size, columns = self._joint_columns
        jacobian = np.zeros((len(self.actuators), size), np.float32)
        slope = -self.config.feedback_gain * 2.0 / (self.joint_high - self.joint_low)
        jacobian[np.arange(len(self.actuators)), columns] = slope * (np.abs(command) < 1.0)
        return jacobian

    def _base_commands(self, states: np.ndarray, frame: int) -> np.ndarray:
        """The controller the plan corrects, at states [N, state] that should be at reference ``frame``."""
        targets = self.env.feed_forward_actions()
        last = len(targets) - 1
        commands = targets[min(frame + 1, last)][None].astype(np.float64)
        if self.config.feedback_gain:
            commands = commands + self.config.feedback_gain * (targets[min(frame, last)] - self._servo_commands(states))
        return commands

    def _rollout(self, state: np.ndarray, corrections: np.ndarray, frame: int) -> np.ndarray:
        """States at the end of every control step [N, horizon, state] from ``state`` (at reference ``frame``), with
        the base controller plus ``corrections`` [N, horizon, actuators]; one rollout call per control step, since
        the base controller reads the state."""
        n, horizon = corrections.shape[:2]
        starts = np.repeat(state[None], n, axis=0)
        control = np.zeros((n, self.substeps, self.model.nu))
        out = np.empty((n, horizon, len(state)))
        for k in range(horizon):
            commands = np.clip(self._base_commands(starts, frame + k) + corrections[:, k], -1.0, 1.0)
            control[:, :, self.actuators] = commands[:, None]
            states, _ = self.pool.rollout(self.model, self.datas, starts, control)
            starts = out[:, k] = states[:, -1]
        return out

    def knots_along(self, states: np.ndarray, commands: np.ndarray, t: int) -> np.ndarray:
        """The plan at clip step ``t`` that a stored run followed: knots [knots, actuators] whose corrections, on the
        run's own states, reproduce its command at step t exactly (the first knot is that step's correction) and
        its later commands over the horizon as well as the spline can (least squares: the run replanned at every
        step, so its commands lie on no single plan). ``states`` [T+1, full state] and ``commands`` [T, actuators]
        of a run from the clip's first frame (agents/lqr.py ``planned_nominal``); zeros past the run's end."""
        horizon = min(self.config.horizon, len(commands) - t)
        if horizon < 1:
            return np.zeros_like(self.nominal)
        corrections = np.stack([commands[t + k] - self._base_commands(states[t + k][None], t + k)[0]
                                for k in range(horizon)])
        knots = np.zeros_like(self.nominal)
        knots[0] = corrections[0]
        weights = self.weights[:horizon]
        if len(knots) > 1 and horizon > 1:
            knots[1:], *_ = np.linalg.lstsq(weights[1:, 1:], corrections[1:] - weights[1:, :1] @ knots[:1],
                                            rcond=None)
        return knots

    def act(self, warm_start: np.ndarray | None = None) -> np.ndarray:
        """The command for the environment's current state. ``warm_start`` (knots [knots, actuators]): the plan to
        refine instead of the last one shifted and decayed (e.g. ``knots_along`` a stored run); the refined plan
        is kept as the next step's warm start either way."""
        start = time.perf_counter()
        cfg = self.config
        state = np.empty(mujoco.mj_stateSize(self.model, mujoco.mjtState.mjSTATE_FULLPHYSICS))
        mujoco.mj_getState(self.model, self.env.physics.data.ptr, state, mujoco.mjtState.mjSTATE_FULLPHYSICS)
        t = self.env.time_step
        if not np.isfinite(state).all():
            raise EnvError(f"the simulator state at step {t} of {self.env.clip} is not finite (the physics "
                           "diverged): nothing to plan from")
        # plan only the steps the episode has left: past its end the reference would be the clip's last frame
        # held still, which no walk can match (the walks' late falls did not move with this: docs/npmp.md)
        horizon = max(1, min(cfg.horizon, self.env.last_step - t))
        reference = self._reference(np.arange(t + 1, t + 1 + horizon))
        if cfg.follow_walker:
            reference = self._moved_over_walker(reference, state, t)

        nominal = cfg.warm_start_decay * (self.shift @ self.nominal) if warm_start is None else warm_start
        std = cfg.noise_std
        best_knots, best_score, nominal_score = nominal, -np.inf, None
        for _ in range(cfg.iterations):
            noise = self.rng.standard_normal((cfg.candidates - 1, *nominal.shape)) * std
            knots = np.concatenate([nominal[None], nominal[None] + noise])      # [N, knots, actuators]
            corrections = np.einsum("hk,nka->nha", self.weights[:horizon], knots)
            scores = self._score(self._rollout(state, corrections, t), reference)
            scores = np.where(np.isfinite(scores), scores, -np.inf)   # a candidate whose rollout diverged loses
            if nominal_score is None:
                nominal_score = float(scores[0])
            order = np.argsort(-scores)
            if scores[order[0]] > best_score:
                best_knots, best_score = knots[order[0]], float(scores[order[0]])
            if cfg.method == "cem":
                nominal = knots[order[:cfg.elites]].mean(axis=0)
                std = max(0.5 * std, float(knots[order[:cfg.elites]].std(axis=0).mean()))
            else:
                nominal = best_knots
        self.nominal = best_knots
        command = np.clip(self._base_commands(state[None], t)[0] + self.weights[0] @ best_knots, -1.0, 1.0)
        self.last_info = PlanInfo(best_score, nominal_score, time.perf_counter() - start, horizon)
        return command.astype(np.float32)


# -- the planner as an agent of the run loop (``train.py --agent mpc``) -------------------------------------------


class PlannedTrackingEnv(gym.Wrapper):
    """A tracking environment that the planner drives: every ``step`` plans from the simulator's state and executes
    the plan's first command. The planner lives with the simulator it plans on -- in whichever process the run
    loop steps the environment (agents/vector.py workers included) -- so the action the loop passes is not used.
    ``info`` carries the planner's numbers; at an episode's end ``episode_metrics`` holds its mean planning time per
    control step and the steps it tracked, which the loop writes to TensorBoard."""

    def __init__(self, env, config: MPCConfig):
        super().__init__(env)
        self.planner = TrackingPlanner(env, config)
        self._seconds, self._steps = 0.0, 0

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.planner.reset()
        self._seconds, self._steps = 0.0, 0
        return obs, info

    def step(self, action):
        command = self.planner.act()
        obs, reward, terminated, truncated, info = self.env.step(command)
        plan = self.planner.last_info
        self._seconds += plan.seconds
        self._steps += 1
        info = {**info, "planning_seconds": plan.seconds, "predicted_return": plan.predicted_return}
        if terminated or truncated:
            info["fell"] = bool(terminated)
            info["episode_metrics"] = {"mpc/seconds_per_control_step": self._seconds / self._steps,
                                       "mpc/steps_tracked": float(self._steps)}
        return obs, reward, terminated, truncated, info

    def close(self):
        self.planner.close()
        super().close()


@dataclasses.dataclass(frozen=True)
class MPCAgentConfig(MPCConfig):
    sequence_length: int = 1   # the run loop's replay unit; the planner never samples it


class MPCAgent(AgentBase):
    """``--agent mpc``: tracking a ``humanoid-track:<snippet>`` clip by planning (``PlannedTrackingEnv``); it
    learns nothing, so it has no updates and an empty state."""

    Config = MPCAgentConfig
    learns = False
    schedule = Schedule(replay_capacity=1000, learning_starts=0, update_every=1, updates_per_step=1, batch_size=1)

    def __init__(self, observation_space, action_space, config: MPCAgentConfig, device):
        config.validate()
        self.config, self.updates = config, 0
        self.action_dim = int(action_space.shape[0])

    @staticmethod
    def wrap_env(env, config: MPCAgentConfig, device, action_repeat: int = 1):
        assert action_repeat == 1, "mpc acts directly: the environment repeats"
        from envs.mocap.tracking import TrackingEnv

        if not isinstance(env, TrackingEnv):
            raise ConfigError("mpc tracks motion capture by planning with its simulator: use "
                              "--env humanoid-track:<snippet> (see `train.py --list`)")
        return PlannedTrackingEnv(env, config)

    def act(self, obs, deterministic: bool = False):
        return np.zeros(self.action_dim, np.float32), 0.0   # unused: the planner acts inside the environment

    def update(self, batch) -> dict:
        return {}

    def state_dict(self) -> dict:
        return {"updates": torch.tensor(self.updates)}

    def load_state_dict(self, state: dict) -> None:
        self.updates = int(state["updates"])
