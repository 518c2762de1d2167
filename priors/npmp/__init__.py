"""Neural probabilistic motor primitives (seed 000 Ch 8): the model (``model.py``) and the saved primitives that
``--agent npmp`` reuses as a frozen low-level controller. The pipeline that builds them from motion capture --
tracking experts, noisy-rollout and LFPC data, distillation, evaluation -- lives in ``pipelines/npmp``
(``python -m pipelines.npmp --help``; docs/npmp.md).

Saved primitives are a module directory (priors/io.py: weights.safetensors + meta.json with the config, the
observation groups the decoder reads, the clips, training steps, beta and evaluation numbers).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from priors.io import ModuleFileError, load_module, save_module
from priors.npmp.model import NPMP, NPMPConfig

__all__ = ["NPMP", "NPMPConfig", "save_primitives", "load_primitives", "DEFAULT_PRIMITIVES", "ModuleFileError"]

FORMAT = "probctl-npmp-primitives"
# the primitives shipped in the repo (trained by `python -m pipelines.npmp all`; docs/npmp.md)
DEFAULT_PRIMITIVES = Path(__file__).resolve().parents[2] / "data" / "primitives" / "npmp"


def save_primitives(model: NPMP, directory: Path, obs_groups: dict[str, int], dtype: torch.dtype | None = None,
                    **meta) -> Path:
    """Save ``model`` with the observation groups (name -> size, in order) that make up its state input; ``dtype``
    (e.g. torch.float16, half the file) stores the weights in another precision, ``load_primitives`` reads them
    back into the model's float32. A ``weights_dtype`` in ``meta`` (re-saving loaded primitives, e.g. with new
    evaluation numbers) keeps the precision they were shipped in."""
    if sum(obs_groups.values()) != model.config.state_dim:
        raise ValueError(f"obs_groups {obs_groups} do not add up to state_dim {model.config.state_dim}")
    stored = meta.pop("weights_dtype", None)
    if dtype is None and stored is not None:
        dtype = getattr(torch, stored)
    state = model.state_dict()
    if dtype is not None:
        state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
        meta = {**meta, "weights_dtype": str(dtype).removeprefix("torch.")}
    return save_module(directory, state, FORMAT,
                       {"config": dataclasses.asdict(model.config), "obs_groups": obs_groups, **meta})


def load_primitives(path: Path | str = DEFAULT_PRIMITIVES, device: torch.device | str = "cpu") -> tuple[NPMP, dict]:
    """(model, meta) from a primitives directory; one-line ``ModuleFileError`` on a missing, corrupt or foreign
    file, or one whose weights do not match its config."""
    directory = Path(path)
    if not directory.is_dir():
        raise ModuleFileError(f"no NPMP primitives at {directory} (a directory with meta.json and "
                              "weights.safetensors, written by `python -m pipelines.npmp distill`)")
    meta, tensors = load_module(directory, FORMAT, device)
    try:
        model = NPMP(NPMPConfig.from_dict(meta["config"]))
        # primitives saved before input normalisation (or before the path existed): identity
        for name in ("state_shift", "state_scale", "path_shift", "path_scale"):
            tensors.setdefault(name, getattr(model, name).to(tensors[next(iter(tensors))].device))
        model.load_state_dict(tensors, strict=True)
        obs_groups = {str(g): int(n) for g, n in meta["obs_groups"].items()}
        if sum(obs_groups.values()) != model.config.state_dim:
            raise ValueError("obs_groups do not add up to state_dim")
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as e:
        raise ModuleFileError(f"{directory}: saved primitives do not match their config "
                              f"({str(e).splitlines()[0]})") from None
    model.requires_grad_(False)
    return model.to(device).eval(), {**meta, "obs_groups": obs_groups}
