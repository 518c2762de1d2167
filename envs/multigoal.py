"""The 2-D multi-goal point environment of Haarnoja et al. 2017 ("Reinforcement Learning with Deep Energy-Based
Policies", the didactic multi-goal example), registered as ``multigoal``.

The constants follow the authors' released code (haarnoja/softqlearning, ``environments/multigoal.py`` and
``examples/multigoal_sql.py``), which is what the paper's figure was produced with:
- state: the position of a point mass in the plane, clipped to the box [-7, 7]^2; observed as group ``proprio``;
- start: N(0, 0.1^2 I) around the origin (``init_sigma`` 0.1), clipped to the box;
- action: a velocity in [-1, 1]^2 (clipped), the dynamics are s' = s + a (no noise);
- goals: (5, 0), (-5, 0), (0, 5), (0, -5);
- reward for the step s -> s' with action a:  r = -(30 ||a||^2 + 1 * min_g ||s' - g||^2) + 10 [min_g ||s' - g|| < 1]
  (action cost 30, distance cost 1, goal reward 10, goal radius 1);
- termination: s' within the goal radius of any goal (a true terminal: no bootstrapping);
- horizon: 30 steps (the example's ``max_path_length``), a truncation.
``info`` holds ``pos`` (the new position) and ``goal`` (the index of the goal reached, or -1).
``render()`` draws the box, the goals and the point into a small RGB array (no plotting library needed).
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from envs.spaces import group_space, unit_action_space

GOALS = np.array([[5.0, 0.0], [-5.0, 0.0], [0.0, 5.0], [0.0, -5.0]])
GOAL_RADIUS = 1.0
GOAL_REWARD = 10.0
ACTION_COST = 30.0
DISTANCE_COST = 1.0
INIT_SIGMA = 0.1
BOUND = 7.0
HORIZON = 30


def names() -> list[str]:
    return ["multigoal"]


def make(name: str, seed: int | None = None, action_repeat: int = 1, **kwargs) -> gym.Env:
    from envs import EnvError

    if name != "multigoal":
        raise EnvError(f"unknown multigoal environment {name!r}")
    try:
        return MultiGoalEnv(seed=seed, action_repeat=action_repeat, **kwargs)
    except TypeError as e:
        raise EnvError(f"cannot build multigoal: {e}") from None


def nearest_goal(position: np.ndarray) -> tuple[int, float]:
    """Index of the nearest goal and the distance to it."""
    dist = np.linalg.norm(GOALS - position, axis=-1)
    i = int(np.argmin(dist))
    return i, float(dist[i])


def step_reward(next_position: np.ndarray, action: np.ndarray) -> float:
    """The step reward without the goal bonus: -(action cost + distance cost), at the new position."""
    _, dist = nearest_goal(next_position)
    return -(ACTION_COST * float(np.sum(action ** 2)) + DISTANCE_COST * dist ** 2)


class MultiGoalEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, seed: int | None = None, action_repeat: int = 1, horizon: int = HORIZON,
                 render_mode: str = "rgb_array"):
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        self.observation_space = group_space({"proprio": 2})
        self.action_space = unit_action_space(2)
        self.action_repeat, self.horizon, self.render_mode = action_repeat, horizon, render_mode
        self._rng = np.random.default_rng(seed)
        self.position = np.zeros(2)
        self._steps = 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {"proprio": self.position.astype(np.float32)}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.position = np.clip(INIT_SIGMA * self._rng.standard_normal(2), -BOUND, BOUND)
        self._steps = 0
        return self._obs(), {"pos": self.position.copy()}

    def step(self, action):
        action = np.clip(np.asarray(action, np.float64).reshape(2), -1.0, 1.0)
        reward, terminated, goal = 0.0, False, -1
        for _ in range(self.action_repeat):
            self.position = np.clip(self.position + action, -BOUND, BOUND)
            reward += step_reward(self.position, action)
            i, dist = nearest_goal(self.position)
            if dist < GOAL_RADIUS:
                reward += GOAL_REWARD
                terminated, goal = True, i
                break
        self._steps += 1
        truncated = not terminated and self._steps >= self.horizon
        return self._obs(), reward, terminated, truncated, {"pos": self.position.copy(), "goal": goal}

    def render(self, size: int = 96) -> np.ndarray:
        image = np.full((size, size, 3), 255, np.uint8)

        def pixel(p):  # world (x, y) -> (row, col), y up
            col = int(round((p[0] + BOUND) / (2 * BOUND) * (size - 1)))
            row = int(round((BOUND - p[1]) / (2 * BOUND) * (size - 1)))
            return row, col

        def disc(p, radius, colour):
            row, col = pixel(p)
            rr, cc = np.ogrid[:size, :size]
            image[(rr - row) ** 2 + (cc - col) ** 2 <= radius ** 2] = colour

        goal_px = max(1, int(GOAL_RADIUS / (2 * BOUND) * size))
        for g in GOALS:
            disc(g, goal_px, (230, 160, 40))
        disc(self.position, max(1, size // 40), (30, 60, 200))
        return image
