"""Environments: ``envs.make(name)`` returns a ``gymnasium.Env`` with a ``Dict`` observation split into named groups.

Names:
- every dm_control suite task as ``domain-task`` (``cartpole-swingup``, ``walker-walk``, ``humanoid-run``, ...);
- Gymnasium ids as ``gym:<id>`` (``gym:Humanoid-v5``, ``gym:Pendulum-v1``, ...);
- this package's own families (``_FAMILIES``): the Ch 7 locomotion tasks ``<walker>-<task>`` (envs/locomotion.py),
  ``deep-sea-N`` (envs/deep_sea.py), ``multigoal`` (envs/multigoal.py), ``humanoid-track[:<snippet>]`` mocap tracking
  (envs/mocap/).

Every environment observes a ``Dict`` of flat float32 groups: ``proprio`` always, ``task`` where the task has
task information (targets, goals, external objects). Continuous actions are scaled to [-1, 1].
"""
from __future__ import annotations

import difflib
import os

# Headless rendering: EGL unless the user chose a backend; must be set before mujoco/dm_control import.
os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym  # noqa: E402

__all__ = ["make", "names", "EnvError", "UnknownEnvError"]


class EnvError(ValueError):
    """An environment cannot be built (missing optional dependency, unsupported spaces, ...)."""


class UnknownEnvError(EnvError):
    """Raised for an environment name that is not registered; the message suggests close matches."""


def _dmc_names() -> list[str]:
    from dm_control import suite

    return [f"{domain}-{task}" for domain, task in suite.ALL_TASKS]


def _gym_names() -> list[str]:
    return [f"gym:{env_id}" for env_id in sorted(gym.registry)]


# Environment families defined in this package. Each module exposes ``names() -> list[str]`` (the names to list)
# and ``make(name, seed, action_repeat, **kwargs) -> gym.Env``, and optionally ``accepts(name) -> bool`` when it
# builds more names than it lists (``deep-sea-N`` for any N); add a family by adding its module here.
_FAMILIES: tuple[str, ...] = ("envs.multigoal", "envs.deep_sea", "envs.locomotion", "envs.mocap")


def _family_of(name: str):
    import importlib

    for module_name in _FAMILIES:
        module = importlib.import_module(module_name)
        accepts = getattr(module, "accepts", None)
        if accepts(name) if accepts is not None else name in module.names():
            return module
    return None


def catalogue() -> dict[str, list[str]]:
    """Environment names by family (what ``train.py --list`` prints)."""
    import importlib

    own = {f"{m.split('.')[-1]} (this package)": importlib.import_module(m).names() for m in _FAMILIES}
    return {**own, "dm_control suite": _dmc_names(), "Gymnasium": _gym_names()}


def names() -> list[str]:
    """All environment names ``make`` accepts."""
    return [n for family in catalogue().values() for n in family]


def make(name: str, seed: int | None = None, action_repeat: int = 1, **kwargs) -> gym.Env:
    """Build the environment called ``name`` (see the module docstring for the naming scheme).

    ``seed`` seeds the environment's own random state (initial states, targets); ``action_repeat`` repeats each
    action that many simulator control steps and sums the rewards. Extra keyword arguments go to the underlying
    constructor (dm_control ``environment_kwargs`` / ``gymnasium.make`` kwargs).
    """
    if not isinstance(action_repeat, int) or action_repeat < 1:
        raise EnvError(f"action_repeat must be a positive integer, got {action_repeat!r}")
    if seed is not None and not 0 <= seed < 2**32:
        raise EnvError(f"seed must be in [0, 2**32), got {seed}")
    if name.startswith("gym:"):
        env_id = name[len("gym:"):]
        if env_id not in gym.registry:
            raise _unknown(name)
        from envs.gym_env import GymEnv

        try:
            return GymEnv(env_id, seed=seed, action_repeat=action_repeat, **kwargs)
        except (gym.error.Error, ImportError, ValueError, TypeError) as e:
            raise EnvError(f"cannot build {name}: {e}".splitlines()[0]) from None
    family = _family_of(name)
    if family is not None:
        return family.make(name, seed=seed, action_repeat=action_repeat, **kwargs)
    if name in _dmc_names():
        from envs.dmc import DMCEnv

        domain, task = name.split("-", 1)
        return DMCEnv(domain, task, seed=seed, action_repeat=action_repeat, **kwargs)
    raise _unknown(name)


def _unknown(name: str) -> UnknownEnvError:
    close = difflib.get_close_matches(name, names(), n=4, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return UnknownEnvError(f"unknown environment {name!r}.{hint} (`python train.py --list` shows all names)")
