"""DeepSea (bsuite's deep-exploration grid), registered as ``deep-sea-N`` for any N >= 1.

Definition (Osband et al. 2018, "Randomized Prior Functions for Deep RL", and bsuite's
``bsuite/environments/deep_sea.py``, deterministic version):
- an N x N grid; the agent starts in the top-left cell (row 0, column 0) and falls one row per step, so every
  episode lasts exactly N steps and ends in a true terminal (discount 0);
- two actions; in every cell (row, column) a fixed random bit ``mapping[row, column]`` decides which action
  index means "right": action == mapping[row, column] moves one column right (clipped at N-1), the other
  action moves one column left (clipped at 0). The mapping is drawn once per environment,
  ``numpy.random.RandomState(mapping_seed).binomial(1, 0.5, [N, N])`` as in bsuite;
- every "right" costs 0.01 / N; taking "right" while already in the last column N-1 pays +1. Column N-1 can
  only be reached on the last row, so the +1 comes on the final step.

Cost accounting, checked against bsuite's code: the only rewarded trajectory takes "right" N times (N-1 moves to
reach column N-1, then "right" on the last row), so the optimal return is 1 - N * 0.01 / N = 0.99 for every N
(bsuite: ``optimal_return = 1 - unscaled_move_cost``); always going left returns 0, and any other trajectory
returns a small negative number.

Observation: the one-hot N x N position, flattened row-major, as the ``proprio`` group of a ``Dict`` space (the
repository's convention); after the final step it is all zeros (bsuite's "null observation"). Action space:
``Discrete(2)``.

Seeds: the action mapping comes from ``mapping_seed`` (default 0), not from ``seed``. bsuite's environment also
takes a separate ``mapping_seed``; keeping the mapping independent of ``seed`` matters here because the trainer
builds its evaluation environment with another seed (run seed + 10000), and an evaluation on a differently
mapped grid would measure a different problem. ``seed`` is accepted for the common interface; the deterministic
DeepSea has no other randomness. Experiments that want several problem instances pass ``mapping_seed``.
"""
from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs import EnvError
from envs.spaces import group_space

__all__ = ["DeepSea", "names", "accepts", "make", "parse_size", "LISTED_SIZES"]

LISTED_SIZES = (10, 14, 20, 30)
_NAME = re.compile(r"deep-sea-(-?\d+)")
MOVE_COST = 0.01  # bsuite's unscaled move cost: each "right" costs MOVE_COST / N


def parse_size(name: str) -> int | None:
    """N for a name ``deep-sea-N`` (N may be invalid, make() says so), None for names of other families."""
    match = _NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def accepts(name: str) -> bool:
    """Every ``deep-sea-N`` is buildable, not only the listed sizes (``make`` rejects a bad N with one line)."""
    return isinstance(name, str) and parse_size(name) is not None


def names() -> list[str]:
    return [f"deep-sea-{n}" for n in LISTED_SIZES]


def make(name: str, seed: int | None = None, action_repeat: int = 1, mapping_seed: int = 0, **kwargs) -> "DeepSea":
    size = parse_size(name)
    if size is None:
        raise EnvError(f"{name!r} is not a DeepSea name (expected deep-sea-N)")
    if action_repeat != 1:
        raise EnvError(f"{name}: DeepSea moves one row per step; action_repeat must be 1, got {action_repeat}")
    if kwargs:
        raise EnvError(f"{name}: unknown option(s) {sorted(kwargs)}; DeepSea takes only mapping_seed")
    return DeepSea(size, mapping_seed=mapping_seed, seed=seed)


class DeepSea(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, size: int, mapping_seed: int = 0, seed: int | None = None):
        if not isinstance(size, (int, np.integer)) or size < 1:
            raise EnvError(f"DeepSea size must be an integer >= 1, got {size!r}")
        if not 0 <= mapping_seed < 2**32:
            raise EnvError(f"mapping_seed must be in [0, 2**32), got {mapping_seed}")
        self.size = int(size)
        self.mapping_seed = mapping_seed
        self.move_cost = MOVE_COST / self.size
        self.action_mapping = np.random.RandomState(mapping_seed).binomial(1, 0.5, [self.size, self.size])
        self.observation_space = group_space({"proprio": self.size * self.size})
        self.action_space = spaces.Discrete(2)
        self.render_mode = "rgb_array"
        self.optimal_return = 1.0 - MOVE_COST
        self._seed = seed
        self.row = self.column = 0
        self._over = True

    def right_action(self, row: int, column: int) -> int:
        """The action index that moves right in cell (row, column)."""
        return int(self.action_mapping[row, column])

    def _observation(self) -> dict[str, np.ndarray]:
        grid = np.zeros((self.size, self.size), np.float32)
        if self.row < self.size:  # after the last step: the all-zero null observation
            grid[self.row, self.column] = 1.0
        return {"proprio": grid.ravel()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed if seed is not None else self._seed)
        self._seed = None
        self.row = self.column = 0
        self._over = False
        return self._observation(), {}

    def step(self, action):
        if self._over:
            raise EnvError("DeepSea episode is over; call reset() before step()")
        value = np.asarray(action)
        if value.size != 1 or value.reshape(()).item() not in (0, 1):
            raise EnvError(f"DeepSea actions are 0 or 1, got {action!r}")
        index = int(value.reshape(()).item())
        right = index == self.action_mapping[self.row, self.column]
        reward = 0.0
        if right:
            if self.column == self.size - 1:
                reward += 1.0
            self.column = min(self.column + 1, self.size - 1)
            reward -= self.move_cost
        else:
            self.column = max(self.column - 1, 0)
        self.row += 1
        self._over = self.row == self.size
        return self._observation(), reward, self._over, False, {}

    def render(self):
        """The grid as an RGB image (8 pixels per cell): the agent white, the rewarding corner green."""
        image = np.zeros((self.size, self.size, 3), np.uint8)
        image[-1, -1] = (0, 160, 0)
        if self.row < self.size:
            image[self.row, self.column] = 255
        return image.repeat(8, axis=0).repeat(8, axis=1)
