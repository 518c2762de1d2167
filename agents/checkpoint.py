"""Checkpoints: safetensors for tensors, JSON for everything else, written atomically. Nothing is ever unpickled.

Layout of ``<run_dir>/checkpoints``::

    step-000050000/            one complete checkpoint
        model.safetensors      agent tensors (networks, targets, optimiser moments)
        replay.safetensors     the replay buffer's arrays
        state.json             config, counters, RNG states, the nested-state skeleton, SHA-256 of both files
    latest                     name of the newest complete checkpoint directory

A checkpoint is written into ``step-N.tmp-<pid>``, fsynced, renamed to ``step-N`` and only then named in
``latest`` (itself replaced atomically), so a process killed at any instant leaves the previous checkpoint intact.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.numpy import load_file as load_numpy, save_file as save_numpy
from safetensors.torch import load_file as load_torch, save_file as save_torch

from priors.io import atomic_write_text, fsync_path, sha256_file

FORMAT = "probctl-checkpoint"
VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint or run directory is missing, corrupt or not ours; the message names the path."""


# -- nested state <-> flat tensors + JSON skeleton ----------------------------------------------------------------
def flatten_state(state, prefix: str = "") -> tuple[dict[str, torch.Tensor], object]:
    """Split a nested dict/list state into {key: tensor} and a JSON skeleton that remembers the structure."""
    tensors: dict[str, torch.Tensor] = {}

    def walk(node, path):
        if isinstance(node, torch.Tensor):
            tensors[path] = node.detach().cpu().contiguous().clone()
            return {"__tensor__": path}
        if isinstance(node, dict):
            return {"__dict__": [[k, walk(v, f"{path}/{k}")] for k, v in node.items()]}
        if isinstance(node, (list, tuple)):
            return {"__list__": [walk(v, f"{path}/{i}") for i, v in enumerate(node)]}
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        raise TypeError(f"cannot checkpoint a {type(node).__name__} at {path}")

    return tensors, walk(state, prefix)


def unflatten_state(tensors: dict[str, torch.Tensor], skeleton):
    def build(node):
        if isinstance(node, dict):
            if "__tensor__" in node:
                return tensors[node["__tensor__"]]
            if "__dict__" in node:
                return {k: build(v) for k, v in node["__dict__"]}
            if "__list__" in node:
                return [build(v) for v in node["__list__"]]
        return node

    return build(skeleton)


def arrays_to_tensors(tree):
    """A nested state holding numpy arrays and scalars (a captured environment) in the form ``flatten_state``
    takes: arrays become tensors, numpy scalars Python numbers."""
    if isinstance(tree, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(tree))
    if isinstance(tree, np.generic):
        return tree.item()
    if isinstance(tree, dict):
        return {k: arrays_to_tensors(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [arrays_to_tensors(v) for v in tree]
    return tree


def tensors_to_arrays(tree):
    if isinstance(tree, torch.Tensor):
        return tree.cpu().numpy()
    if isinstance(tree, dict):
        return {k: tensors_to_arrays(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [tensors_to_arrays(v) for v in tree]
    return tree


# -- files ---------------------------------------------------------------------------------------------------------
def save(checkpoint_root: Path, step: int, agent_state: dict, replay_arrays: dict[str, np.ndarray] | None,
         meta: dict, keep: int = 2) -> Path:
    """Write one checkpoint and point ``latest`` at it; keep the newest ``keep`` checkpoints."""
    checkpoint_root = Path(checkpoint_root)
    checkpoint_root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:09d}"
    final = checkpoint_root / name
    tmp = checkpoint_root / f"{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    tensors, skeleton = flatten_state(agent_state)
    save_torch(tensors, str(tmp / "model.safetensors"))
    files = ["model.safetensors"]
    if replay_arrays is not None:
        save_numpy({k: np.ascontiguousarray(v) for k, v in replay_arrays.items()}, str(tmp / "replay.safetensors"))
        files.append("replay.safetensors")
    state = {"format": FORMAT, "version": VERSION, "step": step, "agent_skeleton": skeleton,
             "sha256": {f: sha256_file(tmp / f) for f in files}, **meta}
    (tmp / "state.json").write_text(json.dumps(state, indent=1))
    for f in [*files, "state.json"]:
        fsync_path(tmp / f)
    fsync_path(tmp)
    if final.exists():  # a checkpoint of the same step from an earlier, interrupted run
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_path(checkpoint_root)
    atomic_write_text(checkpoint_root / "latest", name + "\n")
    # prune: older complete checkpoints beyond `keep`, and temp dirs left by killed processes
    complete = sorted((p for p in checkpoint_root.glob("step-*") if ".tmp-" not in p.name and p != final),
                      key=lambda p: int(p.name.split("-")[1]))
    for old in complete[:max(len(complete) - (keep - 1), 0)]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in checkpoint_root.glob("step-*.tmp-*"):
        if stale != tmp:
            shutil.rmtree(stale, ignore_errors=True)
    return final


STEP_NAME = re.compile(r"step-[0-9]{9}")
TENSOR_FILES = ("model.safetensors", "replay.safetensors")
MAX_JSON_BYTES = 64 << 20


def latest(checkpoint_root: Path) -> Path:
    """The checkpoint ``latest`` names, which must be a ``step-N`` directory of this very ``checkpoints/`` folder:
    never a path outside it, ``..``, an absolute path or a symbolic link (any of which would resume silently from
    another run's state)."""
    root = Path(checkpoint_root)
    pointer = root / "latest"
    if pointer.is_symlink() or not pointer.is_file():
        raise CheckpointError(f"no checkpoint found in {root} (missing 'latest')" if not pointer.is_symlink()
                              else f"{pointer} is a symbolic link; it must be a file naming a step-N directory")
    try:
        name = pointer.read_bytes()[:256].decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{pointer} is unreadable ({e.__class__.__name__})") from None
    if not STEP_NAME.fullmatch(name):
        raise CheckpointError(f"{pointer} names {name[:80]!r}, not a step-NNNNNNNNN checkpoint of this run")
    path = root / name
    if path.is_symlink() or not path.is_dir():
        raise CheckpointError(f"{pointer} names {name}, which "
                              + ("is a symbolic link" if path.is_symlink() else "does not exist"))
    return path


def read_json(path: Path):
    """JSON from a file we wrote; any damage (size, encoding, syntax, nesting) is a CheckpointError."""
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            raise CheckpointError(f"{path} is too large ({path.stat().st_size} bytes) to be ours")
        return json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CheckpointError(f"{path} is corrupt ({e.__class__.__name__})") from None


def _count(value, field: str, path: Path) -> int:
    if type(value) is not int or value < 0:   # bool is an int subclass; 1.5, "3", NaN and -1 are refused
        raise CheckpointError(f"{path}/state.json: {field} must be a non-negative integer, got {value!r:.80}")
    return value


def _check_skeleton(node, tensors: set[str], path: Path, depth: int = 0) -> None:
    """Every tensor the layout names exists; the layout is no deeper than any state we write."""
    if depth > 64:
        raise CheckpointError(f"{path}/state.json: agent_skeleton is nested too deeply")
    if isinstance(node, dict):
        if set(node) == {"__tensor__"}:
            if node["__tensor__"] not in tensors:
                raise CheckpointError(f"{path}/state.json names a tensor {str(node['__tensor__'])[:80]!r} "
                                      "that model.safetensors does not hold")
        elif set(node) == {"__dict__"} and isinstance(node["__dict__"], list):
            for item in node["__dict__"]:
                if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], (str, int))):
                    raise CheckpointError(f"{path}/state.json: agent_skeleton has a malformed entry")
                _check_skeleton(item[1], tensors, path, depth + 1)
        elif set(node) == {"__list__"} and isinstance(node["__list__"], list):
            for item in node["__list__"]:
                _check_skeleton(item, tensors, path, depth + 1)
        else:
            raise CheckpointError(f"{path}/state.json: agent_skeleton has a malformed entry")
    elif isinstance(node, float) and not math.isfinite(node):
        raise CheckpointError(f"{path}/state.json: agent_skeleton holds a non-finite number")
    elif not (node is None or isinstance(node, (bool, int, float, str))):
        raise CheckpointError(f"{path}/state.json: agent_skeleton has a malformed entry")


def validate_meta(meta, path: Path) -> dict:
    """state.json's fields, checked before anything is restored: format, version, step, checksums of every tensor
    file in the directory, counters (non-negative integers, ``env_steps`` = ``step``), replay counters."""
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a {FORMAT} checkpoint")
    if meta.get("version") != VERSION:
        raise CheckpointError(f"{path}: checkpoint version {meta.get('version')!r:.40} is not supported ({VERSION})")
    if "agent_skeleton" not in meta:
        raise CheckpointError(f"{path}/state.json is incomplete (no state layout)")
    step = _count(meta.get("step"), "step", path)
    if path.name != f"step-{step:09d}":
        raise CheckpointError(f"{path}/state.json says step {step}, but the directory is {path.name}")
    digests = meta.get("sha256")
    present = sorted(p.name for p in path.iterdir() if p.name.endswith(".safetensors"))
    if not isinstance(digests, dict) or "model.safetensors" not in digests \
            or not set(present) <= set(digests) or not set(digests) <= set(TENSOR_FILES) \
            or not all(isinstance(d, str) and re.fullmatch(r"[0-9a-f]{64}", d) for d in digests.values()):
        raise CheckpointError(f"{path}/state.json: sha256 must give a checksum for every tensor file "
                              f"({', '.join(present) or 'model.safetensors'})")
    counters = meta.get("counters")
    if counters is not None:   # checkpoints of the run loop (train.py); other writers may have none
        if not isinstance(counters, dict):
            raise CheckpointError(f"{path}/state.json: counters must be an object")
        for field in ("env_steps", "actor_steps", "episodes"):
            _count(counters.get(field), f"counters.{field}", path)
        if counters["env_steps"] != step:
            raise CheckpointError(f"{path}/state.json: counters.env_steps ({counters['env_steps']}) is not the "
                                  f"checkpoint's step ({step})")
    replay = meta.get("replay")
    if replay is not None:
        if not isinstance(replay, dict):
            raise CheckpointError(f"{path}/state.json: replay must be an object")
        for field in ("next_write_id", "steps_added", "capacity", "K"):
            _count(replay.get(field), f"replay.{field}", path)
        episodes = replay.get("open", [])
        if not isinstance(episodes, list) or not all(isinstance(e, list) and len(e) == 2 for e in episodes):
            raise CheckpointError(f"{path}/state.json: replay.open must be a list of [stream, write id] pairs")
        for stream, write_id in episodes:
            _count(stream, "replay.open stream", path)
            _count(write_id, "replay.open write id", path)
    return meta


def load(path: Path, device: torch.device | str = "cpu") -> tuple[dict, dict, dict[str, np.ndarray] | None]:
    """Read and verify a checkpoint directory: (meta, agent_state, replay_arrays)."""
    path = Path(path)
    meta = validate_meta(read_json(path / "state.json"), path)
    for name, digest in meta["sha256"].items():
        file = path / name
        if file.is_symlink() or not file.is_file() or sha256_file(file) != digest:
            raise CheckpointError(f"{file} is missing or corrupt (checksum mismatch)")
    try:
        tensors = load_torch(str(path / "model.safetensors"), device=str(device))
        replay = load_numpy(str(path / "replay.safetensors")) if "replay.safetensors" in meta["sha256"] else None
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise CheckpointError(f"{path}: cannot read tensors ({first})") from None
    _check_skeleton(meta["agent_skeleton"], set(tensors), path)
    return meta, unflatten_state(tensors, meta["agent_skeleton"]), replay
