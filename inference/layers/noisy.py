"""NoisyNet linear layer with independent or factorised Gaussian noise.

Seed: 004_22b7c09145613257.txt Sec. 4.1, eq. (24): ``y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b``.
The seed does not give f, the factorised construction or the initialisation; they come from Fortunato
et al. (2017) as the issue asks (EXTERNAL): factorised noise ``eps_w_ij = f(eps_i) f(eps_j)``,
``eps_b_j = f(eps_j)``, ``f(x) = sgn(x) sqrt(|x|)``, ``mu ~ U[-1/sqrt(p), 1/sqrt(p)]``,
``sigma = sigma0 / sqrt(p)`` with sigma0 = 0.5 (bias too); independent noise ``mu ~ U[-sqrt(3/p), sqrt(3/p)]``,
``sigma = 0.017``.  p = in_features.

Noise is held in buffers and changes only on ``reset_noise()``; in eval mode the layer uses the means
(deterministic).  Factorised noise is stored as the two vectors; the noisy weight matrix is formed per call
(one elementwise pass over the weights, then a single GEMM -- cheaper than a second GEMM on the batch).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["NoisyLinear", "reset_noise"]


def _scaled_noise(n: int, like: Tensor, generator: torch.Generator | None) -> Tensor:
    eps = torch.randn(n, generator=generator, dtype=like.dtype, device=like.device)
    return eps.sign() * eps.abs().sqrt()


class NoisyLinear(nn.Module):
    def __init__(self, in_features: int, out_features: int, factorised: bool = True, sigma0: float = 0.5,
                 sigma_independent: float = 0.017):
        super().__init__()
        if in_features < 1 or out_features < 1:
            raise ValueError(f"features must be >= 1, got in={in_features}, out={out_features}.")
        self.in_features, self.out_features, self.factorised = in_features, out_features, factorised
        p = in_features
        bound = 1 / math.sqrt(p) if factorised else math.sqrt(3 / p)
        sigma = sigma0 / math.sqrt(p) if factorised else sigma_independent
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma))
        if factorised:
            self.register_buffer("eps_in", torch.zeros(in_features))
            self.register_buffer("eps_out", torch.zeros(out_features))
        else:
            self.register_buffer("eps_weight", torch.zeros(out_features, in_features))
            self.register_buffer("eps_bias", torch.zeros(out_features))
        self.reset_noise()

    @torch.no_grad()
    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw fresh noise (the only place the noise changes)."""
        w = self.weight_mu
        if self.factorised:
            self.eps_in.copy_(_scaled_noise(self.in_features, w, generator))
            self.eps_out.copy_(_scaled_noise(self.out_features, w, generator))
        else:
            self.eps_weight.copy_(torch.randn(w.shape, generator=generator, dtype=w.dtype, device=w.device))
            self.eps_bias.copy_(torch.randn(self.out_features, generator=generator, dtype=w.dtype, device=w.device))

    def noise(self) -> tuple[Tensor, Tensor]:
        """The current (weight, bias) noise; factorised weight noise is the rank-1 ``eps_out eps_in^T``."""
        if self.factorised:
            return torch.outer(self.eps_out, self.eps_in), self.eps_out
        return self.eps_weight, self.eps_bias

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"expected input [..., {self.in_features}], got {tuple(x.shape)}.")
        if not self.training:
            return F.linear(x, self.weight_mu, self.bias_mu)
        eps_w, eps_b = self.noise()
        return F.linear(x, self.weight_mu + self.weight_sigma * eps_w, self.bias_mu + self.bias_sigma * eps_b)


def reset_noise(net: nn.Module, generator: torch.Generator | None = None) -> None:
    """Reset the noise of every NoisyLinear in ``net``."""
    for m in net.modules():
        if isinstance(m, NoisyLinear):
            m.reset_noise(generator)
