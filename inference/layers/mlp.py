"""Plain multilayer perceptrons: the building block of policies, critics and priors."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import nn


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int, activation: type[nn.Module] = nn.ReLU,
        linear: Callable[[int, int], nn.Module] = nn.Linear) -> nn.Sequential:
    """``linear`` builds each layer: ``nn.Linear``, or e.g. ``NoisyLinear`` for a NoisyNet."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [linear(in_dim, width), activation()]
        in_dim = width
    layers.append(linear(in_dim, out_dim))
    return nn.Sequential(*layers)


def bounded_log_std(raw, low: float = -5.0, high: float = 2.0):
    """``raw`` softly clamped to [low, high] (identity in between, smooth at the edges): a Gaussian head's log std
    that starts near 0 (std ~ 1, broad) and can neither collapse nor explode."""
    import torch.nn.functional as F

    log_std = high - F.softplus(high - raw)
    return low + F.softplus(log_std - low)
