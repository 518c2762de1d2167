"""Gymnasium environments (``gym:<id>``) with the same interface as the dm_control ones.

A flat ``Box`` observation becomes the ``proprio`` group; a ``Dict`` observation keeps its keys as groups (each
flattened). Bounded continuous actions are scaled to [-1, 1]; discrete actions pass through unchanged.
Gymnasium already separates ``terminated`` from ``truncated`` (its TimeLimit wrapper), so both are forwarded.
"""
from __future__ import annotations

import numpy as np
import gymnasium as gym
from gymnasium import spaces

from envs.spaces import ActionScaler, group_space, unit_action_space


class GymEnv(gym.Env):
    def __init__(self, env_id: str, seed: int | None = None, action_repeat: int = 1, **kwargs):
        kwargs.setdefault("render_mode", "rgb_array")
        self._env = gym.make(env_id, **kwargs)
        self._seed = seed
        self.action_repeat = action_repeat
        self.render_mode = self._env.render_mode
        self.metadata = self._env.metadata
        inner = self._env.observation_space
        if isinstance(inner, spaces.Dict):
            self._groups = {k: int(np.prod(s.shape, dtype=int)) for k, s in inner.spaces.items()}
        elif isinstance(inner, spaces.Box):
            self._groups = {"proprio": int(np.prod(inner.shape, dtype=int))}
        else:
            raise ValueError(f"gym:{env_id}: observation space {inner} is not supported (need Box or Dict of Box)")
        self.observation_space = group_space(self._groups)
        inner_act = self._env.action_space
        if isinstance(inner_act, spaces.Box):
            self._scale = ActionScaler(inner_act.low, inner_act.high)
            self.action_space = unit_action_space(inner_act.shape[0])
        else:
            self._scale = None
            self.action_space = inner_act

    def _observation(self, obs) -> dict[str, np.ndarray]:
        if isinstance(obs, dict):
            return {k: np.asarray(obs[k], np.float32).ravel() for k in self._groups}
        return {"proprio": np.asarray(obs, np.float32).ravel()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is None and self._seed is not None:  # first reset takes the constructor's seed
            seed, self._seed = self._seed, None
        obs, info = self._env.reset(seed=seed, options=options)
        return self._observation(obs), info

    def step(self, action):
        physical = self._scale(action).astype(self._env.action_space.dtype) if self._scale else action
        reward, terminated, truncated, info = 0.0, False, False, {}
        for _ in range(self.action_repeat):
            obs, r, terminated, truncated, info = self._env.step(physical)
            reward += float(r)
            if terminated or truncated:
                break
        return self._observation(obs), reward, bool(terminated), bool(truncated), info

    def render(self):
        return self._env.render()

    def close(self):
        self._env.close()
