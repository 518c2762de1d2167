"""Agents: ``agents.make(name, observation_space, action_space, overrides, device)``."""
from __future__ import annotations

import difflib

from agents.config import ConfigError, apply_overrides

__all__ = ["make", "names", "config_class", "resolve_config", "resolve", "ConfigError"]


def _registry() -> dict[str, type]:
    from agents.sql import SQLAgent
    from agents.dqn import DQNAgent
    from agents.svg0 import SVG0Agent
    from agents.npmp import NPMPAgent, NPMPClipsAgent
    from agents.mpc import MPCAgent

    return {"sql": SQLAgent, "svg0": SVG0Agent, "dqn": DQNAgent, "npmp": NPMPAgent, "npmp-clips": NPMPClipsAgent,
            "mpc": MPCAgent}


def names() -> list[str]:
    return sorted(_registry())


def agent_class(name: str) -> type:
    registry = _registry()
    if name not in registry:
        close = difflib.get_close_matches(name, registry, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"unknown agent {name!r}.{hint} Available: {', '.join(sorted(registry))}")
    return registry[name]


def config_class(name: str) -> type:
    return agent_class(name).Config


def make(name: str, observation_space, action_space, config=None, device="cpu"):
    cls = agent_class(name)
    return cls(observation_space, action_space, config if config is not None else cls.Config(), device)


def resolve_config(name: str, overrides: dict[str, str]):
    """Agent ``name``'s config with ``--set``-style ``overrides`` of its own fields."""
    from agents.schedule import FIELDS

    misplaced = [k for k in overrides if k in FIELDS]
    if misplaced:
        raise ConfigError(f"{', '.join(misplaced)} belong(s) to the run's schedule (RunConfig.schedule, "
                          "agents/schedule.py), not to the agent's config; agents.resolve() splits them")
    return apply_overrides(config_class(name)(), overrides)


def resolve(name: str, overrides: dict[str, str]):
    """(agent config, schedule) for agent ``name`` from ``--set``-style ``overrides`` of either: the schedule starts
    from the agent's own (``AgentClass.schedule``)."""
    from agents.schedule import split_schedule

    schedule, own = split_schedule(overrides)
    config = resolve_config(name, own)
    schedule = apply_overrides(agent_class(name).schedule, schedule)
    schedule.validate(config.sequence_length)
    return config, schedule
