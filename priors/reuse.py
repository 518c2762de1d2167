"""Reusing a latent space as an action space (seed 000 Fig 7.5; Ch 8 reuses NPMP decoders the same way).

``LatentActionEnv`` wraps an environment so that a new policy's action is the latent z of a frozen decoder
pi_0(a | s, z): each step, z = scale * action (the policy's actions live in [-1, 1]; z has the AR(1) marginal
N(0, I), so scale 3 covers +-3 standard deviations), and the environment receives tanh of the decoder's mean for the
current observation (a deterministic low-level controller: the high-level policy's own noise explores -- a choice
the thesis leaves open). Observations, rewards and episode ends pass through unchanged.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from priors.io import ModuleFileError


class LatentActionEnv(gym.Wrapper):
    def __init__(self, env: gym.Env, decode, latent_dim: int, obs_groups: dict[str, int], scale: float = 3.0,
                 device: torch.device | str = "cpu"):
        super().__init__(env)
        spaces = env.observation_space.spaces
        actual = {g: int(np.prod(spaces[g].shape)) for g in obs_groups if g in spaces}
        if actual != dict(obs_groups):
            raise ModuleFileError(f"the latent controller was trained on observation groups {dict(obs_groups)}, "
                                  f"this environment has {({g: int(np.prod(s.shape)) for g, s in spaces.items()})}")
        self.decode, self.groups, self.scale, self.device = decode, list(obs_groups), scale, torch.device(device)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (latent_dim,), np.float32)
        self._obs = None

    def reset(self, **kwargs):
        self._obs, info = self.env.reset(**kwargs)
        return self._obs, info

    @torch.no_grad()
    def low_level_action(self, latent_action: np.ndarray) -> np.ndarray:
        obs = np.concatenate([np.asarray(self._obs[g], np.float32).ravel() for g in self.groups])
        z = self.scale * torch.as_tensor(np.asarray(latent_action, np.float32), device=self.device)
        mean, _ = self.decode(torch.as_tensor(obs, device=self.device), z)
        return torch.tanh(mean).cpu().numpy()

    def step(self, action):
        self._obs, reward, terminated, truncated, info = self.env.step(self.low_level_action(action))
        return self._obs, reward, terminated, truncated, info
