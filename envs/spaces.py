"""Helpers shared by the environment wrappers: observation groups and action scaling."""
from __future__ import annotations

import numpy as np
from gymnasium import spaces


def group_space(sizes: dict[str, int]) -> spaces.Dict:
    """A Dict space of flat, unbounded float32 boxes, one per observation group."""
    return spaces.Dict({g: spaces.Box(-np.inf, np.inf, (n,), np.float32) for g, n in sizes.items()})


def unit_action_space(dim: int) -> spaces.Box:
    return spaces.Box(-1.0, 1.0, (dim,), np.float32)


class ActionScaler:
    """Maps actions in [-1, 1] linearly onto [low, high] (clipping first, so the simulator never sees more)."""

    def __init__(self, low: np.ndarray, high: np.ndarray):
        low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError("cannot scale an unbounded action space to [-1, 1]")
        self.low, self.high = low, high

    def __call__(self, action: np.ndarray) -> np.ndarray:
        action = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
        return self.low + 0.5 * (action + 1.0) * (self.high - self.low)
