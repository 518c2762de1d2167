"""Flat observation vectors from grouped (Dict) observations, with per-group slices.

Replay and networks work on one flat float32 vector per state; ``ObsLayout`` remembers where each group lives so
a network can see only some groups (information asymmetry: a prior that sees only ``proprio``).
"""
from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces


class ObsLayout:
    def __init__(self, observation_space: spaces.Dict):
        if not isinstance(observation_space, spaces.Dict):
            raise ValueError("agents need a Dict observation space of observation groups (use envs.make)")
        self.slices: dict[str, slice] = {}
        start = 0
        for group, space in observation_space.spaces.items():
            size = int(np.prod(space.shape, dtype=int))
            self.slices[group] = slice(start, start + size)
            start += size
        self.dim = start

    @property
    def groups(self) -> list[str]:
        return list(self.slices)

    def flatten(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([np.asarray(obs[g], np.float32).ravel() for g in self.slices])

    def check_groups(self, groups) -> list[str]:
        unknown = [g for g in groups if g not in self.slices]
        if unknown:
            raise ValueError(f"unknown observation group(s) {unknown}; this environment has {self.groups}")
        return list(groups)

    def size(self, groups) -> int:
        return sum(self.slices[g].stop - self.slices[g].start for g in self.check_groups(groups))

    def select(self, flat: torch.Tensor, groups) -> torch.Tensor:
        """The columns of ``flat`` that belong to ``groups`` (in layout order)."""
        if list(groups) == self.groups:
            return flat
        return torch.cat([flat[..., self.slices[g]] for g in self.groups if g in groups], dim=-1)


class RunningNormalizer(torch.nn.Module):
    """Running per-dimension mean and variance of observations; ``forward`` standardises and clips to +-``clip``.

    Statistics are buffers (float64, so a million updates do not drift), saved and restored with the agent. They
    are updated from the states the actor visits, never from evaluation episodes; the learner normalises replayed
    observations with the current statistics (as SimBa/SimbaV2 do), so replay itself keeps raw observations.
    """

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge a batch [N, dim] into the statistics (Chan et al.'s parallel variance update)."""
        x = x.reshape(-1, self.mean.shape[0]).to(torch.float64)
        n = x.shape[0]
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False)
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean += delta * n / total
        self.var.copy_((self.var * self.count + batch_var * n + delta.pow(2) * self.count * n / total) / total)
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = (self.var + self.eps).rsqrt().to(x.dtype)
        return ((x - self.mean.to(x.dtype)) * scale).clamp(-self.clip, self.clip)
