"""Config dataclasses <-> ``--set key=value`` strings and JSON."""
from __future__ import annotations

import dataclasses
import difflib
import math
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


def section_type(kind) -> type | None:
    """The dataclass of a config section field (``prior: PriorSection``, ``schedule: Schedule | None``), else None."""
    for candidate in (kind, *typing.get_args(kind)):
        if dataclasses.is_dataclass(candidate):
            return candidate
    return None


def settable_keys(cls) -> list[str]:
    """Every ``--set`` key of a config class: its fields, and ``section.field`` for the fields of its sections."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        section = section_type(hints[f.name])
        out += [f"{f.name}.{k}" for k in settable_keys(section)] if section else [f.name]
    return out


def check_numbers(config) -> None:
    """Limits every config shares: no float setting is NaN or infinite, and learning rates (fields named ``lr`` or
    ``*_lr``) lie in (0, 1] -- an Adam step size of 1e39 overflows inside the optimiser instead of failing here."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            check_numbers(value)
            continue
        values = value if isinstance(value, tuple) else (value,)
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise ConfigError(f"{f.name} must be finite, got {value}")
        if (f.name == "lr" or f.name.endswith("_lr")) and isinstance(value, (int, float)) \
                and not 0 < value <= 1:
            raise ConfigError(f"{f.name} is a learning rate and must be in (0, 1], got {value}")


def _with_overrides(config, overrides: dict[str, str], prefix: str = ""):
    """``config`` with string ``overrides`` parsed by each field's type; ``section.key`` sets a field of a section,
    and a bare section name sets the section's ``kind`` (``prior=mlp`` is ``prior.kind=mlp``)."""
    hints = typing.get_type_hints(type(config))
    fields = {f.name for f in dataclasses.fields(config)}
    changes, sections = {}, {}
    for key, value in overrides.items():
        name, dot, rest = key.partition(".")
        section = section_type(hints[name]) if name in fields else None
        if section is not None and not dot:
            if "kind" not in {f.name for f in dataclasses.fields(section)}:
                raise ConfigError(f"{prefix}{name} is a section: set its fields ({prefix}{name}.<key>)")
            dot, rest = ".", "kind"
        if name not in fields or bool(dot) != (section is not None):
            valid = settable_keys(type(config))
            close = difflib.get_close_matches(key, valid, n=3) or [k for k in valid if k.endswith(f".{key}")]
            hint = f" Did you mean {', '.join(prefix + c for c in close)}?" if close else \
                f" Valid keys: {', '.join(prefix + k for k in sorted(valid))}"
            raise ConfigError(f"unknown setting {prefix + key!r} for {type(config).__name__}.{hint}")
        if section is not None:
            sections.setdefault(name, {})[rest] = value
        else:
            changes[name] = _parse(value, hints[name], prefix + key)
    for name, values in sections.items():
        current = getattr(config, name)
        if current is None:
            raise ConfigError(f"{prefix}{name} is not resolved yet and cannot be changed here")
        changes[name] = _with_overrides(current, values, f"{prefix}{name}.")
    return dataclasses.replace(config, **changes)


def apply_overrides(config, overrides: dict[str, str]):
    """A copy of dataclass ``config`` with string ``overrides`` (``--set`` pairs) parsed by each field's type,
    checked and validated."""
    config = _with_overrides(config, overrides)
    check_numbers(config)
    if hasattr(config, "validate"):
        config.validate()
    return config


def _from_json(value, kind, key: str):
    """A saved JSON value as a field of type ``kind``, checked strictly (a saved run is not parsed leniently: "x"
    is no int and "no" no bool)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        section = section_type(kind)
        if section is not None and isinstance(value, dict):   # a saved section: its own errors name the field
            return from_dict(section, value)
        for arg in args:
            if arg is not type(None):
                try:
                    return _from_json(value, arg, key)
                except ConfigError:
                    pass
        raise ConfigError(f"{key} has the wrong type ({type(value).__name__}: {value!r:.60})")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{key} must be one of {', '.join(map(str, args))}, got {value!r:.60}")
        return value
    if origin in (tuple, list):
        if not isinstance(value, list):
            raise ConfigError(f"{key} must be a list, got {type(value).__name__}")
        inner = args[0] if args else str
        return tuple(_from_json(v, inner, key) for v in value)
    if dataclasses.is_dataclass(kind):
        return from_dict(kind, value)
    expected = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}.get(kind)
    if expected is None:
        raise ConfigError(f"{key} cannot be read from a saved config")
    if not isinstance(value, expected) or (kind is not bool and isinstance(value, bool)):
        raise ConfigError(f"{key} must be {kind.__name__}, got {type(value).__name__} {value!r:.60}")
    return float(value) if kind is float else value


def from_dict(cls, data: dict):
    """Rebuild a config saved with ``dataclasses.asdict``: every field type-checked, ranges validated."""
    if not isinstance(data, dict):
        raise ConfigError(f"saved config for {cls.__name__} must be an object, got {type(data).__name__}")
    if hasattr(cls, "upgrade_saved"):   # configs saved by an older version, in its layout
        data = cls.upgrade_saved(dict(data))
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ConfigError(f"saved config has unknown fields {sorted(unknown)} for {cls.__name__}")
    config = cls(**{k: _from_json(v, hints[k], k) for k, v in data.items()})
    check_numbers(config)
    if hasattr(config, "validate"):
        config.validate()
    return config


def split_overrides(pairs: list[str]) -> dict[str, str]:
    """``["key=value", ...]`` (train.py's ``--set``) -> ``{"key": "value"}``; one ConfigError for a malformed pair."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out
