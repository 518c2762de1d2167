"""The agent protocol: what the run loop (agents/loop.py) calls on every agent, declared instead of probed.

An agent is built as ``cls(observation_space, action_space, config, device)`` and learns from batches of replayed
sequences (agents/replay.py). ``AgentBase`` gives the optional hooks their do-nothing defaults.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from agents.schedule import Schedule


class TrainingDiverged(RuntimeError):
    """A loss, a metric or an action became NaN/inf; the last checkpoint is left untouched."""


class RunInterrupted(Exception):
    """SIGINT or SIGTERM stopped a run after its current step; a checkpoint of that step was written first."""

    def __init__(self, signum: int, step: int, checkpoint):
        import signal

        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        super().__init__(f"{signal.Signals(signum).name} at step {step}; checkpoint written to {checkpoint}")

    @property
    def exit_status(self) -> int:
        return 128 + self.signum   # the shell's convention: 130 for SIGINT, 143 for SIGTERM


@runtime_checkable
class Agent(Protocol):
    updates: int  # learner updates so far (checkpointed)
    learns: bool  # whether the loop calls ``update`` at all
    relabels: bool  # whether the loop hands finished episodes to ``relabel``
    schedule: Schedule  # the replay/update schedule it was measured with: a run's default (agents/schedule.py)

    def act(self, obs: np.ndarray, deterministic: bool = False) -> tuple[Any, float]:
        """An action for one flat observation and its behaviour log-probability log mu(a|s)."""

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float | torch.Tensor]:
        """One learner step; metrics as floats or 0-d tensors (read only when the loop logs them)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...

    def begin_episode(self) -> None:
        """Per-episode hook: a Thompson head, fresh exploration noise, a new latent chain."""

    def export_artifacts(self, run_dir: Path) -> None:
        """Write what other runs reuse (a learned prior) beside each checkpoint."""

    def observe(self, states: np.ndarray) -> None:
        """States [N, D] the actors visited (for running statistics); never evaluation states."""

    def refresh(self, replay, actor_steps: int) -> dict:
        """After each round of updates: work on the whole replay (a Bayesian layer refitting its sites), at the
        agent's own pace; metrics to log, or {}."""

    def acting_state(self) -> dict:
        """What a distributed actor needs to act like this agent (agents/actors.py)."""

    def load_acting_state(self, state: dict) -> None: ...

    def relabel(self, first_obs: np.ndarray, steps: list) -> list[tuple[np.ndarray, list[tuple]]]:
        """Extra episodes for replay made from one finished episode (its first flat state and its ``Transition``s):
        [(first flat state, [(action, log_prob, reward, terminated, next flat state, over), ...])], e.g. hindsight
        goals (agents/hindsight.py); the loop keeps each stream's episode only where ``relabels`` is true."""


class AgentBase:
    """Do-nothing defaults for the optional hooks of ``Agent``, and ``wrap_env`` for agents that act directly."""

    learns = True  # False: the loop never calls ``update`` (a planner)
    relabels = False  # True: the loop hands every finished episode to ``relabel``

    def begin_episode(self) -> None:
        pass

    def relabel(self, first_obs: np.ndarray, steps: list) -> list[tuple[np.ndarray, list[tuple]]]:
        return []

    def export_artifacts(self, run_dir: Path) -> None:
        pass

    def observe(self, states: np.ndarray) -> None:
        pass

    def refresh(self, replay, actor_steps: int) -> dict:
        return {}

    def acting_state(self) -> dict:
        """Default: the whole learner state (agents with large optimiser states should send less)."""
        return self.state_dict()

    def load_acting_state(self, state: dict) -> None:
        self.load_state_dict(state)

    @staticmethod
    def acts_through_controller(config) -> bool:
        """Whether ``wrap_env`` puts a frozen low-level controller between the agent and the environment; such a
        controller must see every control step, so the run's action repeat is the wrapper's, not the env's."""
        return False

    @staticmethod
    def env_options(config) -> dict:
        """Options the agent needs ``envs.make`` to build its environment with (e.g. a start on the reference walk a
        frozen controller follows); default none."""
        return {}

    @staticmethod
    def wrap_env(env, config, device, action_repeat: int = 1):
        """The environment the agent acts in: ``env`` itself, or a wrapper (a frozen low-level controller) that
        holds each of the agent's actions for ``action_repeat`` control steps (only where
        ``acts_through_controller``; otherwise the environment itself repeats and this is 1)."""
        assert action_repeat == 1, "only an agent that acts through a controller repeats in its wrapper"
        return env
