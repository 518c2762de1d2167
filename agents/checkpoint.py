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
import os
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


def latest(checkpoint_root: Path) -> Path:
    pointer = Path(checkpoint_root) / "latest"
    if not pointer.is_file():
        raise CheckpointError(f"no checkpoint found in {checkpoint_root} (missing 'latest')")
    try:
        path = Path(checkpoint_root) / pointer.read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{pointer} is unreadable ({e.__class__.__name__})") from None
    if not path.is_dir():
        raise CheckpointError(f"{pointer} names {path.name}, which does not exist")
    return path


def load(path: Path, device: torch.device | str = "cpu") -> tuple[dict, dict, dict[str, np.ndarray] | None]:
    """Read and verify a checkpoint directory: (meta, agent_state, replay_arrays)."""
    path = Path(path)
    try:
        meta = json.loads((path / "state.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: state.json is missing or corrupt ({e.__class__.__name__})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a {FORMAT} checkpoint")
    if meta.get("version") != VERSION:
        raise CheckpointError(f"{path}: checkpoint version {meta.get('version')} is not supported ({VERSION})")
    if not isinstance(meta.get("sha256"), dict) or "agent_skeleton" not in meta:
        raise CheckpointError(f"{path}/state.json is incomplete (no checksums or state layout)")
    for name, digest in meta["sha256"].items():
        file = path / name
        if not file.is_file() or sha256_file(file) != digest:
            raise CheckpointError(f"{file} is missing or corrupt (checksum mismatch)")
    try:
        tensors = load_torch(str(path / "model.safetensors"), device=str(device))
        replay = load_numpy(str(path / "replay.safetensors")) if "replay.safetensors" in meta["sha256"] else None
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{path}: cannot read tensors ({e})") from None
    return meta, unflatten_state(tensors, meta["agent_skeleton"]), replay
