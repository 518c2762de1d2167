"""Sequence replay: a ring buffer of steps from which learners draw overlapping sequences of length K.

Actors write one row per visited state: the observation and, once the agent has acted from it, the action, the
behaviour log-probability log mu(a|s) (needed by Retrace, seed 000 Alg 9), the reward and the discount of the
transition (0 only at a true terminal). The last state of an episode is a row *without* an action; its observation is
what a truncated episode bootstraps from. Each row carries a global write id and the write id of its successor in
the same episode (``next_id``), so a sequence continues from row i only to the row written as its successor, and
only while that row has not been overwritten: a sequence never straddles two episodes, nor the ring's write
position. Several actors' environments (``stream``) can write interleaved rows into one ring; each stream's
episode is linked on its own. Sampled sequences come with ``mask`` (a prefix of ones) marking the steps that really
belong to the sequence; the K+1 observations include the state after the last valid step.
"""
from __future__ import annotations

import numpy as np
import torch

_FIELDS = ("obs", "action", "behaviour_log_prob", "reward", "discount", "has_action", "write_id", "next_id")


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``x`` over the valid steps of replayed sequences (``mask`` from ``SequenceReplay.sample``)."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


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
        self.next_id = np.full(capacity, -1, np.int64)  # write id of the row's successor in its episode; -1: none
        self.next_write_id = 0  # total rows ever written
        self.steps_added = 0
        self._open: dict[int, int] = {}  # stream -> write id of its newest row, which awaits an action

    def __len__(self) -> int:
        return min(self.next_write_id, self.capacity)

    @property
    def cursor(self) -> int:
        return self.next_write_id % self.capacity

    def _write_obs(self, obs: np.ndarray) -> int:
        i = self.cursor
        self.obs[i] = obs
        self.has_action[i] = False
        self.write_id[i] = self.next_write_id
        self.next_id[i] = -1
        self.next_write_id += 1
        return self.next_write_id - 1

    def start_episode(self, obs: np.ndarray, stream: int = 0) -> None:
        self._open[stream] = self._write_obs(obs)

    def add(self, action: np.ndarray, behaviour_log_prob: float, reward: float, terminated: bool,
            next_obs: np.ndarray, episode_over: bool, stream: int = 0) -> None:
        """Record the step taken from ``stream``'s newest row, then the state it led to.

        ``terminated``: a true terminal (discount 0); ``episode_over``: the episode ended (terminal or truncated),
        so ``next_obs`` is its final row and the stream's next call must be ``start_episode``.
        """
        if stream not in self._open:
            raise RuntimeError("call start_episode(obs) before adding steps to a new episode")
        open_id = self._open.pop(stream)
        i = open_id % self.capacity
        if self.write_id[i] != open_id:  # the ring overwrote the state this step starts from (other streams wrote
            if not episode_over:         # a whole capacity since): the step is lost, the episode goes on from here
                self._open[stream] = self._write_obs(next_obs)
            return
        self.action[i] = action
        self.behaviour_log_prob[i] = behaviour_log_prob
        self.reward[i] = reward
        self.discount[i] = 0.0 if terminated else 1.0
        self.has_action[i] = True
        self.steps_added += 1
        self.next_id[i] = self._write_obs(next_obs)
        if not episode_over:
            self._open[stream] = self.next_id[i]

    def _successors(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ring index of each row's successor, and whether the step from the row to it is stored."""
        nid = self.next_id[idx]
        nxt = np.where(nid >= 0, nid, 0) % self.capacity
        return nxt, self.has_action[idx] & (nid >= 0) & (self.write_id[nxt] == nid)

    def _valid_starts(self, idx: np.ndarray) -> np.ndarray:
        return self._successors(idx)[1]

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
        rows = np.empty((batch_size, self.K + 1), np.int64)  # [B, K+1], following each episode's links
        step_ok = np.empty((batch_size, self.K), bool)
        rows[:, 0] = starts
        for k in range(self.K):
            rows[:, k + 1], step_ok[:, k] = self._successors(rows[:, k])
        # step k continues the sequence iff every step before it did and its row is the stored successor
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

    def transitions(self) -> dict[str, np.ndarray]:
        """Every stored one-step transition whose successor row is still held: obs, action, reward, discount,
        next_obs and write_id [N, ...] (for learners that refit on the whole buffer, e.g. a Bayesian last layer)."""
        idx = np.arange(len(self))
        nxt, ok = self._successors(idx)
        idx, nxt = idx[ok], nxt[ok]
        return {"obs": self.obs[idx], "action": self.action[idx], "reward": self.reward[idx],
                "discount": self.discount[idx], "next_obs": self.obs[nxt], "write_id": self.write_id[idx]}

    # -- checkpointing: plain arrays plus counters, no pickling ------------------------------------------------
    def arrays(self) -> dict[str, np.ndarray]:
        """The filled rows of every field (rows are filled from 0 upwards until the ring wraps)."""
        return {name: getattr(self, name)[:len(self)] for name in _FIELDS}

    def counters(self) -> dict:
        return {"next_write_id": self.next_write_id, "steps_added": self.steps_added,
                "capacity": self.capacity, "K": self.K,
                "open": [[int(stream), int(write_id)] for stream, write_id in sorted(self._open.items())]}

    def load(self, arrays: dict[str, np.ndarray], counters: dict) -> None:
        if counters["capacity"] != self.capacity or counters["K"] != self.K:
            raise ValueError("replay checkpoint has a different capacity or sequence length than the config")
        filled = min(int(counters["next_write_id"]), self.capacity)
        if "next_id" not in arrays:  # saved before episodes were linked: each row's successor was the next write
            arrays = {**arrays, "next_id": np.where(arrays["has_action"], arrays["write_id"] + 1, -1)}
        for name in _FIELDS:
            current = getattr(self, name)
            expected = (filled, *current.shape[1:])
            if arrays[name].shape != expected or arrays[name].dtype != current.dtype:
                raise ValueError(f"replay checkpoint field {name!r} has shape {arrays[name].shape}, "
                                 f"expected {expected}")
            current[:filled] = arrays[name]
        self.next_write_id = int(counters["next_write_id"])
        self.steps_added = int(counters["steps_added"])
        # the episodes in progress: continued when the run restores its environments (exact resume); a stream that
        # starts a fresh episode instead simply replaces its entry
        self._open = {int(stream): int(write_id) for stream, write_id in counters.get("open", [])}
