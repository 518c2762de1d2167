"""The replay/update schedule of a run: how much experience is kept and when, how often and on how much the learner
updates. It belongs to the run (``RunConfig.schedule``, saved in the run's config.json), not to an agent's
algorithm: each agent class only declares the schedule it was measured with (``AgentClass.schedule``), which a run
starts from and ``--set`` changes (``--set batch_size=32`` or ``--set schedule.batch_size=32``).

The update points: actor step k is an update point when k >= ``learning_starts`` and k % ``update_every`` == 0;
at each, the learner takes ``updates_per_step`` updates on ``batch_size`` replayed sequences. The update ratio is
``updates_per_step / update_every`` learner updates per actor step.
"""
from __future__ import annotations

import dataclasses

from agents.config import ConfigError


@dataclasses.dataclass(frozen=True)
class Schedule:
    replay_capacity: int = 1_000_000   # steps kept in replay (oldest overwritten)
    learning_starts: int = 500         # actor steps before the first update
    update_every: int = 1              # actor steps between update points
    updates_per_step: int = 1          # learner updates at each update point
    batch_size: int = 16               # sequences per learner update

    def validate(self, sequence_length: int = 1) -> None:
        if self.replay_capacity <= sequence_length + 1:
            raise ConfigError(f"replay_capacity must exceed sequence_length + 1 = {sequence_length + 1}, "
                              f"got {self.replay_capacity}")
        if self.learning_starts < 0:
            raise ConfigError(f"learning_starts must be >= 0, got {self.learning_starts}")
        for name in ("update_every", "updates_per_step", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")

    def updates_between(self, before: int, after: int) -> int:
        """Learner updates due for actor steps k in (before, after]: ``updates_per_step`` at every update point
        (one actor step at a time, or N at once from N environments: the same ratio)."""
        low = max(before + 1, self.learning_starts)
        points = after // self.update_every - (low - 1) // self.update_every if low <= after else 0
        return max(0, points) * self.updates_per_step


FIELDS = tuple(f.name for f in dataclasses.fields(Schedule))


def split_schedule(overrides: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the schedule's ``--set`` pairs, named without their optional ``schedule.`` prefix; the other pairs)."""
    schedule = {k.removeprefix("schedule."): v for k, v in overrides.items()
                if k in FIELDS or k.startswith("schedule.")}
    rest = {k: v for k, v in overrides.items() if k not in FIELDS and not k.startswith("schedule.")}
    return schedule, rest
