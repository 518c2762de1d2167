"""Sequence replay: a ring buffer of steps from which learners draw overlapping sequences of length K.

Actors write one row per visited state: the observation and, once the agent has acted from it, the action, the
behaviour log-probability log mu(a|s) (needed by Retrace, seed 000 Alg 9), the reward and the discount of the
transition (0 only at a true terminal). The last state of an episode is a row *without* an action; its observation is
what a truncated episode bootstraps from. Each row carries a global write id, so a sequence continues from row i to
row i+1 only if row i has an action and row i+1 was written right after it: a sequence never straddles two
episodes, nor the ring's write position. Sampled sequences come with ``mask`` (a prefix of ones) marking the steps
that really belong to the sequence; the K+1 observations include the state after the last valid step.
"""
from __future__ import annotations

import numpy as np
import torch

_FIELDS = ("obs", "action", "behaviour_log_prob", "reward", "discount", "has_action", "write_id")


class SequenceReplay:
    def __init__(self, capacity: int, obs_dim: int, action_dim: int, sequence_length: int,
                 rng: np.random.Generator | None = None):
        if capacity <= sequence_length + 1:
            raise ValueError(f"replay capacity {capacity} must exceed the sequence length {sequence_length} + 1")
        self.capacity, self.K = int(capacity), int(sequence_length)
        self.rng = rng if rng is not None else np.random.default_rng()
        self.obs = np.zeros((capacity, obs_dim), np.float32)
        self.action = np.zeros((capacity, action_dim), np.float32)
        self.behaviour_log_prob = np.zeros(capacity, np.float32)
        self.reward = np.zeros(capacity, np.float32)
        self.discount = np.zeros(capacity, np.float32)
        self.has_action = np.zeros(capacity, bool)
        self.write_id = np.full(capacity, -1, np.int64)
        self.next_write_id = 0  # total rows ever written
        self.steps_added = 0
        self._open = False  # whether the newest row awaits an action

    def __len__(self) -> int:
        return min(self.next_write_id, self.capacity)

    @property
    def cursor(self) -> int:
        return self.next_write_id % self.capacity

    def _write_obs(self, obs: np.ndarray) -> None:
        i = self.cursor
        self.obs[i] = obs
        self.has_action[i] = False
        self.write_id[i] = self.next_write_id
        self.next_write_id += 1

    def start_episode(self, obs: np.ndarray) -> None:
        self._write_obs(obs)
        self._open = True

    def add(self, action: np.ndarray, behaviour_log_prob: float, reward: float, terminated: bool,
            next_obs: np.ndarray, episode_over: bool) -> None:
        """Record the step taken from the newest row, then the state it led to.

        ``terminated``: a true terminal (discount 0); ``episode_over``: the episode ended (terminal or truncated),
        so ``next_obs`` is its final row and the next call must be ``start_episode``.
        """
        if not self._open:
            raise RuntimeError("call start_episode(obs) before adding steps to a new episode")
        i = (self.next_write_id - 1) % self.capacity
        self.action[i] = action
        self.behaviour_log_prob[i] = behaviour_log_prob
        self.reward[i] = reward
        self.discount[i] = 0.0 if terminated else 1.0
        self.has_action[i] = True
        self.steps_added += 1
        self._write_obs(next_obs)
        self._open = not episode_over

    def _valid_starts(self, idx: np.ndarray) -> np.ndarray:
        nxt = (idx + 1) % self.capacity
        return self.has_action[idx] & (self.write_id[nxt] == self.write_id[idx] + 1)

    def can_sample(self) -> bool:
        """Whether at least one complete transition is stored (any step keeps its successor row)."""
        return self.steps_added > 0

    def sample(self, batch_size: int, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """Draw ``batch_size`` sequences with uniformly chosen start steps.

        Returns obs [B, K+1, D], action [B, K, A], behaviour_log_prob, reward, discount, mask [B, K] and
        write_id [B, K] (each step's global write id: a fixed identity per transition, e.g. for bootstrap masks).
        """
        size = len(self)
        starts = np.empty(0, np.int64)
        for _ in range(100):
            cand = self.rng.integers(0, size, size=2 * batch_size)
            starts = np.concatenate([starts, cand[self._valid_starts(cand)]])
            if len(starts) >= batch_size:
                break
        else:
            raise RuntimeError("replay holds no complete transition to sample yet")
        starts = starts[:batch_size]
        rows = (starts[:, None] + np.arange(self.K + 1)) % self.capacity  # [B, K+1]
        # step k continues the sequence iff every step before it did and row k follows row k-1 directly
        follows = self.write_id[rows[:, 1:]] == self.write_id[rows[:, :-1]] + 1  # [B, K]
        step_ok = self.has_action[rows[:, :-1]] & follows
        mask = np.cumprod(step_ok, axis=1).astype(np.float32)
        obs_ok = np.concatenate([np.ones((batch_size, 1), np.float32), mask], axis=1)
        steps = rows[:, :-1]
        batch = {
            "obs": self.obs[rows] * obs_ok[..., None],
            "action": self.action[steps] * mask[..., None],
            "behaviour_log_prob": self.behaviour_log_prob[steps] * mask,
            "reward": self.reward[steps] * mask,
            "discount": self.discount[steps] * mask,
            "mask": mask,
            "write_id": self.write_id[steps],
        }
        return {k: torch.as_tensor(v, device=device) for k, v in batch.items()}

    # -- checkpointing: plain arrays plus counters, no pickling ------------------------------------------------
    def arrays(self) -> dict[str, np.ndarray]:
        """The filled rows of every field (rows are filled from 0 upwards until the ring wraps)."""
        return {name: getattr(self, name)[:len(self)] for name in _FIELDS}

    def counters(self) -> dict:
        return {"next_write_id": self.next_write_id, "steps_added": self.steps_added, "open": self._open,
                "capacity": self.capacity, "K": self.K}

    def load(self, arrays: dict[str, np.ndarray], counters: dict) -> None:
        if counters["capacity"] != self.capacity or counters["K"] != self.K:
            raise ValueError("replay checkpoint has a different capacity or sequence length than the config")
        filled = min(int(counters["next_write_id"]), self.capacity)
        for name in _FIELDS:
            current = getattr(self, name)
            expected = (filled, *current.shape[1:])
            if arrays[name].shape != expected or arrays[name].dtype != current.dtype:
                raise ValueError(f"replay checkpoint field {name!r} has shape {arrays[name].shape}, "
                                 f"expected {expected}")
            current[:filled] = arrays[name]
        self.next_write_id = int(counters["next_write_id"])
        self.steps_added = int(counters["steps_added"])
        self._open = bool(counters["open"])
