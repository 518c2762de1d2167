"""Bayes by Backprop linear layer with local reparameterisation and a scale-mixture prior.

Seeds:
* 004_22b7c09145613257.txt Sec. 3.3 (Blundell et al. 2015): ``sigma = log(1 + exp(rho))``,
  ``w = mu + sigma * eps`` (Proposition 1 gradients), scale-mixture prior
  ``P(w) = prod_j pi N(w_j | 0, s1^2) + (1 - pi) N(w_j | 0, s2^2)`` (the seed prints s1 twice; the second
  scale is s2), values of pi, s1, s2 not stated -- the defaults pi = 0.5, s1 = 1, s2 = e^-6 come from
  Blundell et al.'s search grid (EXTERNAL) and are arguments.  Sec. 3.3.2 minibatch KL weights
  (``inference.vi.minibatch_kl_weights``).  Sec. 3.4, Algorithm 2 with z = 1: local reparameterisation,
  sampling pre-activations ``M_h + sqrt(V_h) * E`` with ``M_h = H M_w``, ``V_h = H^2 Sigma_w``.
* 001_dc5bafdce3ec8872.txt (2.41)-(2.44): mean-field Gaussian BNN, analytic KL to a Gaussian prior and
  ``log q(theta) - log p0(theta)`` when the KL is intractable (the scale mixture).

The KL is exposed separately (``layer.kl()``), so a training loss reads
``nll + kl_weight * sum(m.kl() for m in bayesian_modules(net))``.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributions import Categorical, Distribution, MixtureSameFamily, Normal

from inference.vi.objectives import kl_term

__all__ = ["GaussianPrior", "ScaleMixturePrior", "WeightSample", "BayesLinear", "bayesian_modules", "kl_loss"]


class GaussianPrior(nn.Module):
    """Elementwise N(0, sigma^2) weight prior (device follows the module)."""

    def __init__(self, sigma: float = 1.0):
        super().__init__()
        if not sigma > 0:
            raise ValueError(f"prior sigma must be > 0, got {sigma}.")
        self.register_buffer("sigma", torch.tensor(float(sigma)))

    def forward(self) -> Distribution:
        return Normal(torch.zeros_like(self.sigma), self.sigma, validate_args=False)


class ScaleMixturePrior(nn.Module):
    """Elementwise ``pi N(0, s1^2) + (1 - pi) N(0, s2^2)`` (no analytic KL: Monte Carlo KL is used)."""

    def __init__(self, pi: float = 0.5, sigma1: float = 1.0, sigma2: float = math.exp(-6)):
        super().__init__()
        if not (0.0 < pi < 1.0 and sigma1 > 0 and sigma2 > 0):
            raise ValueError(f"need 0 < pi < 1 and sigma1, sigma2 > 0; got pi={pi}, sigma1={sigma1}, sigma2={sigma2}.")
        self.register_buffer("probs", torch.tensor([pi, 1.0 - pi]))
        self.register_buffer("sigmas", torch.tensor([sigma1, sigma2]))

    def forward(self) -> Distribution:
        return MixtureSameFamily(Categorical(probs=self.probs, validate_args=False),
                                 Normal(torch.zeros_like(self.sigmas), self.sigmas, validate_args=False),
                                 validate_args=False)


class WeightSample(NamedTuple):
    weight: Tensor      # [n, out, in]
    bias: Tensor        # [n, out]


class BayesLinear(nn.Module):
    """Mean-field Gaussian linear layer.  ``forward`` is stochastic in train and eval mode (posterior
    predictive sampling); with ``local_reparam`` it samples pre-activations, else one weight matrix per call.

    ``kl(n_samples)``: analytic KL for a Gaussian prior, Monte Carlo (``n_samples`` weight draws) otherwise.
    ``sample_weights(n)`` / ``forward_sampled(x, ws)``: n explicit weight draws for K-sample objectives
    (VR bounds), with ``log_ratio(ws) = log q(w) - log p(w)`` per draw.
    """

    def __init__(self, in_features: int, out_features: int, prior: nn.Module | None = None,
                 local_reparam: bool = True, bias: bool = True, init_sigma: float = 1e-3):
        super().__init__()
        if in_features < 1 or out_features < 1:
            raise ValueError(f"features must be >= 1, got in={in_features}, out={out_features}.")
        self.in_features, self.out_features, self.local_reparam = in_features, out_features, local_reparam
        bound = 1.0 / math.sqrt(in_features)
        rho0 = math.log(math.expm1(init_sigma))           # softplus^-1(init_sigma)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_rho = nn.Parameter(torch.full((out_features, in_features), rho0))
        if bias:
            self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
            self.bias_rho = nn.Parameter(torch.full((out_features,), rho0))
        else:
            self.register_parameter("bias_mu", None)
            self.register_parameter("bias_rho", None)
        self.prior = prior if prior is not None else GaussianPrior(1.0)

    def _posteriors(self) -> list[Normal]:
        qs = [Normal(self.weight_mu, F.softplus(self.weight_rho), validate_args=False)]
        if self.bias_mu is not None:
            qs.append(Normal(self.bias_mu, F.softplus(self.bias_rho), validate_args=False))
        return qs

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"expected input [..., {self.in_features}], got {tuple(x.shape)}.")
        w_sigma = F.softplus(self.weight_rho)
        if self.local_reparam:
            mean = F.linear(x, self.weight_mu, self.bias_mu)
            b_var = None if self.bias_rho is None else F.softplus(self.bias_rho) ** 2
            var = F.linear(x * x, w_sigma * w_sigma, b_var)
            return mean + var.sqrt() * torch.randn_like(mean)
        w = self.weight_mu + w_sigma * torch.randn_like(w_sigma)
        b = None if self.bias_mu is None else self.bias_mu + F.softplus(self.bias_rho) * torch.randn_like(self.bias_mu)
        return F.linear(x, w, b)

    def _priors(self) -> list[Distribution]:
        """One prior per parameter tensor (weight, bias): a prior module returns one elementwise distribution
        shared by both, or a list with one per tensor (a previous posterior as the prior: inference/vi/continual.py)."""
        prior = self.prior()
        return list(prior) if isinstance(prior, (list, tuple)) else [prior] * len(self._posteriors())

    def kl(self, n_samples: int = 1) -> Tensor:
        total = 0.0
        for q, prior in zip(self._posteriors(), self._priors()):
            z = q.rsample((n_samples,))
            total = total + kl_term(q, prior, z).sum()
        return total

    def sample_weights(self, n: int, generator: torch.Generator | None = None) -> WeightSample:
        qw = self._posteriors()
        eps = torch.randn((n,) + self.weight_mu.shape, generator=generator,
                          dtype=self.weight_mu.dtype, device=self.weight_mu.device)
        w = qw[0].loc + qw[0].scale * eps
        if self.bias_mu is None:
            b = torch.zeros(n, self.out_features, dtype=w.dtype, device=w.device)
        else:
            eps_b = torch.randn((n,) + self.bias_mu.shape, generator=generator, dtype=w.dtype, device=w.device)
            b = qw[1].loc + qw[1].scale * eps_b
        return WeightSample(w, b)

    def log_ratio(self, ws: WeightSample) -> Tensor:
        """``log q(w) - log p(w)`` for each of the n draws (shape [n])."""
        priors, qs = self._priors(), self._posteriors()
        out = (qs[0].log_prob(ws.weight) - priors[0].log_prob(ws.weight)).flatten(1).sum(-1)
        if self.bias_mu is not None:
            out = out + (qs[1].log_prob(ws.bias) - priors[1].log_prob(ws.bias)).sum(-1)
        return out

    @staticmethod
    def forward_sampled(x: Tensor, ws: WeightSample) -> Tensor:
        """x: [n, B, in] (or [B, in], shared) -> [n, B, out] with draw k applied to x[k]."""
        if x.dim() == 2:
            x = x.expand(ws.weight.shape[0], *x.shape)
        return torch.baddbmm(ws.bias.unsqueeze(1), x, ws.weight.transpose(1, 2))


def bayesian_modules(net: nn.Module) -> list[nn.Module]:
    """Every module of ``net`` (itself included) with a ``kl()`` method (BayesLinear, MNFLinear, hypernets)."""
    return [m for m in net.modules() if callable(getattr(m, "kl", None))]


def kl_loss(net: nn.Module, n_samples: int = 1) -> Tensor:
    """Sum of the KL terms of all Bayesian layers of ``net``."""
    return sum(m.kl(n_samples) for m in bayesian_modules(net))
