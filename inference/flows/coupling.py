"""Masked affine coupling step (masked RealNVP with the IAF-style gated update).

Seed: 004_22b7c09145613257.txt Sec. 3.4, eq. (22) (multiplicative normalising flows, Louizos & Welling 2017):
``h = tanh(f(m * z)); mu = g(h); sigma = sigmoid(k(h));
z' = m * z + (1 - m) * (z * sigma + (1 - sigma) * mu)``, ``log|dz'/dz| = (1 - m)^T log sigma``.
The seed draws m ~ Bern(0.5); we use alternating half masks (first/second half, swapped every step) so
every coordinate is transformed -- a random mask can leave a coordinate untouched in every step.
f, g, k are single linear layers (sizes are not stated in the seed).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from inference.flows.core import FlowTransform

__all__ = ["CouplingTransform", "Coupling"]


class CouplingTransform(FlowTransform):
    def __init__(self, step: "Coupling"):
        super().__init__()
        self.step = step

    def _gate(self, z):
        h = torch.tanh(self.step.f(z * self.step.mask))
        return self.step.g(h), self.step.k(h)

    def _forward_and_ladj(self, x):
        m = self.step.mask
        mu, s = self._gate(x)
        sigma = torch.sigmoid(s)
        y = m * x + (1 - m) * (x * sigma + (1 - sigma) * mu)
        return y, ((1 - m) * F.logsigmoid(s)).sum(-1)

    def _inverse(self, y):
        m = self.step.mask
        mu, s = self._gate(y)          # depends on m * y = m * x only
        sigma = torch.sigmoid(s)
        return m * y + (1 - m) * (y - (1 - sigma) * mu) / sigma


class Coupling(nn.Module):
    """Unconditional masked coupling step on R^features; ``parity`` picks which half is kept."""

    def __init__(self, features: int, hidden: int = 32, parity: bool = False):
        super().__init__()
        if features < 2:
            raise ValueError("a coupling step needs features >= 2.")
        mask = (torch.arange(features) < features // 2).float()
        self.register_buffer("mask", 1 - mask if parity else mask)
        self.f = nn.Linear(features, hidden)
        self.g = nn.Linear(hidden, features)
        self.k = nn.Linear(hidden, features)
        with torch.no_grad():
            self.k.weight.mul_(0.01)
            self.k.bias.fill_(1.5)     # sigmoid(1.5) ~ 0.82: close to the identity at the start

    def forward(self, c: Tensor | None = None) -> CouplingTransform:
        if c is not None:
            raise ValueError("Coupling steps are unconditional; call them without a context.")
        return CouplingTransform(self)
