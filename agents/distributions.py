"""Tanh-squashed diagonal Gaussian: the policy distribution of the continuous-control agents.

Actions are bounded to (-1, 1) by a = tanh(u), u ~ N(mean, std). The log-density carries the change-of-variables
correction  log pi(a) = sum_i [log N(u_i; mean_i, std_i) - log(1 - tanh(u_i)^2)]  with the numerically stable form
log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)).  Densities of *stored* actions invert tanh on actions clamped
to +-(1 - 1e-6); acting stores ``log_prob(action)`` through the same path so behaviour and target log-probs agree.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_EDGE = 1.0 - 1e-6


def _tanh_log_det(u: torch.Tensor) -> torch.Tensor:
    return 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))


class SquashedGaussian:
    def __init__(self, mean: torch.Tensor, std: torch.Tensor):
        self.mean, self.std = mean, std

    def __getitem__(self, index) -> "SquashedGaussian":
        """The distributions at some batch positions (``index`` must leave the action dimension whole)."""
        return SquashedGaussian(self.mean[index], self.std[index])

    def _normal_log_prob(self, u: torch.Tensor) -> torch.Tensor:
        z = (u - self.mean) / self.std
        return -0.5 * z.pow(2) - self.std.log() - _LOG_SQRT_2PI

    def rsample_with_log_prob(self, n: int | None = None, generator: torch.Generator | None = None):
        """Reparameterised sample(s) and their log-densities; ``n`` adds a leading sample dimension."""
        shape = self.mean.shape if n is None else (n, *self.mean.shape)
        eps = torch.randn(shape, device=self.mean.device, dtype=self.mean.dtype, generator=generator)
        u = self.mean + self.std * eps
        log_prob = (self._normal_log_prob(u) - _tanh_log_det(u)).sum(-1)
        return torch.tanh(u), log_prob

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        u = torch.atanh(action.clamp(-_EDGE, _EDGE))
        return (self._normal_log_prob(u) - _tanh_log_det(u)).sum(-1)

    @property
    def mode(self) -> torch.Tensor:
        return torch.tanh(self.mean)
