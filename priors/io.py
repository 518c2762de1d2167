"""Saving modules so they can be moved between runs: safetensors for tensors, JSON for the rest. Nothing is unpickled.

A saved module is a directory::

    <dir>/weights.safetensors     the module's state dict
    <dir>/meta.json               {"format", "version", "config", ..., "sha256": {"weights.safetensors": ...}}

It is written into a temporary sibling directory, fsynced and renamed into place, so readers see either the old or
the new complete directory. ``load_module`` checks the format name, version and checksum before reading any tensor.
The file helpers here are also what agents/checkpoint.py builds its checkpoints from.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

VERSION = 1


class ModuleFileError(ValueError):
    """A saved module is missing, corrupt or of another kind; the message names the path."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_path(path.parent)


def save_module(directory: Path, state: dict[str, torch.Tensor], format_name: str, meta: dict) -> Path:
    """Write ``state`` and ``meta`` as a module directory (see the module docstring), replacing any earlier one."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.with_name(f".{directory.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(tmp / "weights.safetensors"))
    record = {"format": format_name, "version": VERSION, **meta,
              "sha256": {"weights.safetensors": sha256_file(tmp / "weights.safetensors")}}
    (tmp / "meta.json").write_text(json.dumps(record, indent=1))
    for name in ("weights.safetensors", "meta.json"):
        fsync_path(tmp / name)
    fsync_path(tmp)
    old = directory.with_name(f".{directory.name}.old-{os.getpid()}")
    if directory.exists():
        os.replace(directory, old)
    os.replace(tmp, directory)
    fsync_path(directory.parent)
    shutil.rmtree(old, ignore_errors=True)
    return directory


def load_module(directory: Path, format_name: str, device: torch.device | str = "cpu"
                ) -> tuple[dict, dict[str, torch.Tensor]]:
    """(meta, tensors) of a module directory written by ``save_module`` with the same ``format_name``."""
    directory = Path(directory)
    meta_path = directory / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModuleFileError(f"{meta_path} is missing or corrupt ({e.__class__.__name__})") from None
    if not isinstance(meta, dict) or meta.get("format") != format_name:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise ModuleFileError(f"{directory} is not a {format_name} file (format {found!r})")
    if meta.get("version") != VERSION:
        raise ModuleFileError(f"{directory}: version {meta.get('version')} is not supported ({VERSION})")
    weights = directory / "weights.safetensors"
    expected = (meta.get("sha256") or {}).get("weights.safetensors")
    if not weights.is_file() or expected is None or sha256_file(weights) != expected:
        raise ModuleFileError(f"{weights} is missing or corrupt (checksum mismatch)")
    try:
        tensors = load_file(str(weights), device=str(device))
    except (SafetensorError, OSError) as e:
        raise ModuleFileError(f"{weights}: cannot read tensors ({e})") from None
    return meta, tensors
