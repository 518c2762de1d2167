"""dm_control suite tasks as Gymnasium environments with grouped observations.

Observation groups: dm_control's named observations are flattened and concatenated into ``proprio`` (the body's
own state) and ``task`` (targets, goals and external objects). A key is task information when it names a target
or goal, or is listed in ``_TASK_KEYS`` below; everything else is proprioception.

``DMEnv`` wraps any ``dm_env`` environment built by a ``load(seed)`` function (``envs/locomotion.py`` gives it
dm_control composer environments and its own grouping); ``DMCEnv`` is a suite task.

Episode ends: dm_control ends suite episodes by time limit with discount 1 (``truncated``); a step with discount 0
is a true terminal (``terminated``).

Episodes in progress can be captured and restored (``get_state``/``set_state``, for exact resume of a run): the
simulator's integration state (``mjSTATE_INTEGRATION``: time, positions, velocities, actuator activations, controls,
the solver's warm start), the model geometry that tasks move between episodes (targets are bodies, geoms or sites
placed in the model), the environment's step counter and random streams, and whatever Python state the task keeps
(``task_state``; suite tasks keep none beyond their random stream). An environment whose task state is unknown
returns None, and a resumed run starts a fresh episode there.
"""
from __future__ import annotations

import mujoco
import numpy as np
import gymnasium as gym

from envs.spaces import ActionScaler, group_space, unit_action_space

# What tasks change in the model between episodes (dm_control suite targets, envs/locomotion.py target sites)
_MODEL_FIELDS = ("body_pos", "body_quat", "geom_pos", "geom_quat", "geom_size", "geom_rgba", "site_pos", "site_quat",
                 "site_size", "site_rgba")
_PHYSICS_STATE = mujoco.mjtState.mjSTATE_INTEGRATION


def random_state_dict(random: np.random.RandomState) -> dict:
    name, keys, pos, has_gauss, cached = random.get_state()
    return {"name": name, "keys": keys.astype(np.int64), "pos": int(pos), "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached)}


def set_random_state(random: np.random.RandomState, state: dict) -> None:
    random.set_state((state["name"], np.asarray(state["keys"]).astype(np.uint32), state["pos"], state["has_gauss"],
                      state["cached_gaussian"]))


# Non-"target" keys that describe the task rather than the body.
_TASK_KEYS = {"object_pos", "object_vel", "box_pos", "box_vel", "ball_state", "origin", "rangefinder"}


def observation_group(key: str) -> str:
    return "task" if ("target" in key or "goal" in key or key in _TASK_KEYS) else "proprio"


class DMEnv(gym.Env):
    """A dm_env environment as a Gymnasium env. ``load(seed)`` builds it; ``group_of(key)`` names the
    observation group of each dm_env observation key; ``camera_id`` is the camera ``render`` uses."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, load, seed: int | None = None, action_repeat: int = 1,
                 render_size: tuple[int, int] = (240, 320), group_of=observation_group, camera_id: int | str = 0):
        self._load = load
        self._seed_rng = np.random.default_rng(seed)
        self._env = self._load(self._next_env_seed())
        self.action_repeat = action_repeat
        self.render_mode = "rgb_array"
        self._render_size = render_size
        self._camera_id = camera_id

        self._keys: dict[str, list[str]] = {}
        sizes: dict[str, int] = {}
        for key, spec in self._env.observation_spec().items():
            group = group_of(key)
            self._keys.setdefault(group, []).append(key)
            sizes[group] = sizes.get(group, 0) + int(np.prod(spec.shape, dtype=int))
        self.observation_space = group_space({g: sizes[g] for g in ("proprio", "task") if g in sizes})
        spec = self._env.action_spec()
        self._scale = ActionScaler(spec.minimum, spec.maximum)
        self.action_space = unit_action_space(spec.shape[0])
        control_dt = self._env.control_timestep() * action_repeat
        self.metadata = {**self.metadata, "render_fps": max(1, round(1.0 / control_dt))}

    def observation_slices(self, group: str) -> dict[str, slice]:
        """Where each dm_env observation of ``group`` lies in that group's flat vector."""
        spec, out, start = self._env.observation_spec(), {}, 0
        for key in self._keys[group]:
            size = int(np.prod(spec[key].shape, dtype=int))
            out[key], start = slice(start, start + size), start + size
        return out

    def _next_env_seed(self) -> int:
        return int(self._seed_rng.integers(2**31 - 1))

    def _observation(self, time_step) -> dict[str, np.ndarray]:
        return self._grouped(time_step.observation)

    def _grouped(self, obs) -> dict[str, np.ndarray]:
        return {g: np.concatenate([np.asarray(obs[k], np.float32).ravel() for k in keys])
                for g, keys in self._keys.items()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:  # a new seed restarts the task's random stream, as Gymnasium promises
            self._seed_rng = np.random.default_rng(seed)
            self._reseed(self._next_env_seed())
        return self._observation(self._env.reset()), self._info()

    def _reseed(self, env_seed: int) -> None:
        """Restart the environment's random stream (by rebuilding it; subclasses may do it in place)."""
        self._env = self._load(env_seed)

    def _info(self) -> dict:
        """The ``info`` dict of ``reset`` and ``step``."""
        return {}

    def step(self, action):
        physical = self._scale(action)
        reward = 0.0
        for _ in range(self.action_repeat):
            time_step = self._env.step(physical)
            reward += time_step.reward or 0.0
            if time_step.last():
                break
        terminated = time_step.last() and time_step.discount == 0.0
        truncated = time_step.last() and not terminated
        return self._observation(time_step), float(reward), bool(terminated), bool(truncated), self._info()

    # -- capturing an episode in progress (module docstring) ----------------------------------------------------
    def task_state(self) -> dict | None:
        """The task's own Python state of the episode in progress; None: unknown, so the episode cannot be
        captured. Suite tasks keep only their random stream (captured by ``get_state``)."""
        return {}

    def set_task_state(self, state: dict) -> None:
        pass

    def _task_random(self) -> np.random.RandomState:
        env = self._env
        return env._random_state if hasattr(env, "_random_state") else env.task.random

    def get_state(self) -> dict | None:
        task = self.task_state()
        if task is None:
            return None
        physics, env = self._env.physics, self._env
        model, data = physics.model.ptr, physics.data.ptr
        state = np.empty(mujoco.mj_stateSize(model, _PHYSICS_STATE))
        mujoco.mj_getState(model, data, state, _PHYSICS_STATE)
        return {"physics": state, "model": {f: np.array(getattr(model, f)) for f in _MODEL_FIELDS},
                "random": random_state_dict(self._task_random()), "seed_rng": self._seed_rng.bit_generator.state,
                "reset_next_step": bool(env._reset_next_step), "step_count": int(getattr(env, "_step_count", 0)),
                "task": task}

    def set_state(self, state: dict) -> None:
        """Continue the episode ``get_state`` captured (of an environment built with the same name and settings)."""
        physics, env = self._env.physics, self._env
        model, data = physics.model.ptr, physics.data.ptr
        values = np.asarray(state["physics"], np.float64)
        if values.shape != (mujoco.mj_stateSize(model, _PHYSICS_STATE),):
            raise ValueError(f"a captured simulator state of size {values.size} does not fit this environment")
        for field in _MODEL_FIELDS:
            getattr(model, field)[:] = np.asarray(state["model"][field]).reshape(getattr(model, field).shape)
        mujoco.mj_setState(model, data, values, _PHYSICS_STATE)
        physics.forward()   # derived quantities (positions of bodies, sensors) for the next observation
        set_random_state(self._task_random(), state["random"])
        self._seed_rng.bit_generator.state = state["seed_rng"]
        env._reset_next_step = bool(state["reset_next_step"])
        if hasattr(env, "_step_count"):
            env._step_count = int(state["step_count"])
        self.set_task_state(state["task"])

    def current_observation(self) -> dict[str, np.ndarray]:
        """The observation of the simulator state as it is now, e.g. after editing it (a perturbed start). Suite
        tasks compute it from the physics; composer tasks observe through buffered sensors, so they cannot."""
        from dm_control.rl import control

        if not isinstance(self._env, control.Environment):
            raise ValueError("this environment observes through buffered sensors; an edited state has no "
                             "observation until the next step")
        self._env.physics.forward()
        return self._grouped(self._env.task.get_observation(self._env.physics))

    def render(self):
        height, width = self._render_size
        return self._env.physics.render(height=height, width=width, camera_id=self._camera_id)

    @property
    def physics(self):
        return self._env.physics

    def control_timestep(self) -> float:
        """Seconds per step of the underlying environment (before ``action_repeat``)."""
        return float(self._env.control_timestep())

    def close(self):
        self._env.close()


class DMCEnv(DMEnv):
    """A dm_control suite task (``domain``, ``task``)."""

    def __init__(self, domain: str, task: str, seed: int | None = None, action_repeat: int = 1,
                 render_size: tuple[int, int] = (240, 320), environment_kwargs: dict | None = None):
        from dm_control import suite

        def load(env_seed: int):
            return suite.load(domain, task, task_kwargs={"random": env_seed},
                              environment_kwargs=environment_kwargs or {})

        super().__init__(load, seed=seed, action_repeat=action_repeat, render_size=render_size)
