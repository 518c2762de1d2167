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
