"""Behaviour priors (seed 000 Ch 7): ``priors.build(PriorConfig(...))``, ``save_prior`` / ``load_prior``.

A saved prior is a directory (priors/io.py) holding its weights, its ``PriorConfig`` and the observation groups it
was trained on, so another run can load it (transfer) and check that it sees the same groups.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from priors.io import ModuleFileError, load_module, save_module
from priors.models import KINDS, LatentPrior, LSTMPrior, MLPPrior, Prior, PriorConfig, build

__all__ = ["KINDS", "Prior", "PriorConfig", "MLPPrior", "LSTMPrior", "LatentPrior", "build", "save_prior",
           "load_prior", "find_prior", "ModuleFileError"]

FORMAT = "probctl-prior"


def save_prior(prior: Prior, directory: Path, obs_groups: dict[str, int], **meta) -> Path:
    """Save ``prior`` with the observation groups (name -> size, in order) its input is made of."""
    config = dataclasses.asdict(prior.config)
    return save_module(directory, prior.state_dict(), FORMAT, {"config": config, "obs_groups": obs_groups, **meta})


def find_prior(path: Path) -> Path:
    """A prior directory, given it or a run directory that exported one (``<run>/prior``)."""
    path = Path(path)
    if (path / "meta.json").is_file():
        return path
    if (path / "prior" / "meta.json").is_file():
        return path / "prior"
    raise ModuleFileError(f"{path} is neither a saved prior nor a run directory with one (no meta.json)")


def load_prior(path: Path, device: torch.device | str = "cpu") -> tuple[Prior, dict]:
    """(prior, meta) from a prior directory or a run directory; one-line ``ModuleFileError`` on any mismatch."""
    directory = find_prior(path)
    meta, tensors = load_module(directory, FORMAT, device)
    try:
        config = meta["config"]
        prior = build(PriorConfig(**{**config, "hidden": tuple(config["hidden"])}))
        prior.load_state_dict(tensors, strict=True)
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise ModuleFileError(f"{directory}: saved prior does not match its config ({str(e).splitlines()[0]})") from None
    return prior.to(device), meta
