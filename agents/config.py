"""Config dataclasses <-> ``--set key=value`` strings and JSON."""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing


class ConfigError(ValueError):
    """A user-supplied setting is unknown or malformed; the message names the fix."""


def box_action_dim(agent: str, action_space) -> int:
    """The action dimension of a 1-d continuous (Box) action space; one clear error for any other space."""
    from gymnasium import spaces

    if not (isinstance(action_space, spaces.Box) and action_space.shape and len(action_space.shape) == 1):
        raise ConfigError(f"{agent} needs a continuous (Box) action space, this environment has {action_space}")
    return int(action_space.shape[0])


def _parse(value: str, kind, key: str):
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value.lower() in ("none", "null") and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _parse(value, arg, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"bad value {value!r} for {key}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{key} must be one of {', '.join(map(str, args))}, got {value!r}")
        return value
    if origin in (tuple, list):
        items = [v for v in value.split(",") if v.strip()]
        inner = args[0] if args else str
        return tuple(_parse(v.strip(), inner, key) for v in items)
    if kind is bool:
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{key} expects true/false, got {value!r}")
    if kind in (int, float):
        try:
            number = float(value) if kind is float else int(float(value))
            if kind is int and float(value) != int(float(value)):
                raise ValueError
            return number
        except ValueError:
            raise ConfigError(f"{key} expects {kind.__name__}, got {value!r}") from None
    if kind is str:
        return value
    raise ConfigError(f"cannot set {key} from the command line")


def apply_overrides(config, overrides: dict[str, str]):
    """A copy of dataclass ``config`` with string ``overrides`` parsed by each field's type."""
    hints = typing.get_type_hints(type(config))
    fields = {f.name for f in dataclasses.fields(config)}
    changes = {}
    for key, value in overrides.items():
        if key not in fields:
            close = difflib.get_close_matches(key, sorted(fields), n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else f" Valid keys: {', '.join(sorted(fields))}"
            raise ConfigError(f"unknown setting {key!r} for {type(config).__name__}.{hint}")
        changes[key] = _parse(value, hints[key], key)
    config = dataclasses.replace(config, **changes)
    if hasattr(config, "validate"):
        config.validate()
    return config


def from_dict(cls, data: dict):
    """Rebuild a config saved with ``dataclasses.asdict`` (JSON lists become tuples again)."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ConfigError(f"saved config has unknown fields {sorted(unknown)} for {cls.__name__}")
    values = {k: tuple(v) if isinstance(v, list) and typing.get_origin(hints[k]) in (tuple, list) else v
              for k, v in data.items()}
    return cls(**values)


def split_overrides(pairs: list[str]) -> dict[str, str]:
    """``["key=value", ...]`` (train.py's ``--set``) -> ``{"key": "value"}``; one ConfigError for a malformed pair."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out
