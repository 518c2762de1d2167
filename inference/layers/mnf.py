"""Multiplicative normalising flow (MNF) linear layer.

Seed: 004_22b7c09145613257.txt Sec. 3.4 (Louizos & Welling 2017): ``z ~ q(z)``, ``w ~ q(w|z) =
prod N(z_i mu_ij, sigma_ij^2)``; q(z_0) Gaussian pushed through masked coupling steps (eq. 22,
``inference.flows.Coupling``); Algorithm 2 forward pass with local reparameterisation
``M_h = (H * z_T) M_w``, ``V_h = H^2 Sigma_w``, output ``M_h + sqrt(V_h) * E``; the auxiliary bound
``E_q(z,w)[log p(y|x,w) + log p(w) + log r(z|w) - log q(w|z) - log q(z)]``.

Choices where the seed is silent (NOT STATED there): the prior p(w) = N(0, prior_sigma^2); one z draw per
forward call, shared across the minibatch (Algorithm 2 samples z_0 once); the bias is a point estimate;
the auxiliary r(z_T | w) is a diagonal Gaussian with ``mean = b1 * a``, ``log-scale = b2 * a``,
``a = tanh(w^T c)`` (the paper additionally passes r through an inverse flow; omitted here, which keeps
the bound valid but possibly looser).  ``kl()`` returns the Monte Carlo estimate of
``KL(q(w|z)||p(w)) + log q(z_T) - log r(z_T|w)`` -- an upper bound on KL(q(w)||p(w)) in expectation.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributions import Independent, Normal, kl_divergence

from inference.flows.core import DiagNormal, Flow
from inference.flows.coupling import Coupling

__all__ = ["MNFLinear"]


class MNFLinear(nn.Module):
    def __init__(self, in_features: int, out_features: int, flow_steps: int = 2, flow_hidden: int = 32,
                 prior_sigma: float = 1.0, init_sigma: float = 1e-3):
        super().__init__()
        if in_features < 2 or out_features < 1:
            raise ValueError(f"MNFLinear needs in_features >= 2 and out_features >= 1, got {in_features}, {out_features}.")
        if not prior_sigma > 0:
            raise ValueError(f"prior_sigma must be > 0, got {prior_sigma}.")
        self.in_features, self.out_features, self.prior_sigma = in_features, out_features, prior_sigma
        base = DiagNormal(in_features)
        with torch.no_grad():          # q(z_0): mean 1 (multiplicative identity), small spread
            base.loc.fill_(1.0)
            base.raw_scale.fill_(math.log(math.expm1(0.1)) - 0.5413)
        self.qz = Flow([Coupling(in_features, flow_hidden, parity=k % 2 == 1) for k in range(flow_steps)], base)
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_rho = nn.Parameter(torch.full((out_features, in_features), math.log(math.expm1(init_sigma))))
        self.bias = nn.Parameter(torch.zeros(out_features))
        self.r_c = nn.Parameter(torch.randn(out_features) / math.sqrt(out_features))
        self.r_b1 = nn.Parameter(torch.ones(in_features))
        self.r_b2 = nn.Parameter(torch.zeros(in_features))

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"expected input [..., {self.in_features}], got {tuple(x.shape)}.")
        z = self.qz().rsample()
        sigma = F.softplus(self.weight_rho)
        mean = F.linear(x * z, self.weight_mu, self.bias)          # M_h = (H * z) M_w
        var = F.linear(x * x, sigma * sigma)                        # V_h = H^2 Sigma_w
        return mean + var.sqrt() * torch.randn_like(mean)

    def kl(self, n_samples: int = 1) -> Tensor:
        qz = self.qz()
        z = qz.rsample((n_samples,))                                # [n, in]
        log_qz = qz.log_prob(z)
        sigma = F.softplus(self.weight_rho)
        qw = Normal(z.unsqueeze(1) * self.weight_mu, sigma, validate_args=False)      # [n, out, in]
        prior = Normal(torch.zeros_like(sigma), torch.full_like(sigma, self.prior_sigma), validate_args=False)
        kl_w = kl_divergence(qw, prior).flatten(1).sum(-1)
        w = qw.rsample()
        a = torch.tanh((w * self.r_c[:, None]).sum(1))                # [n, in]
        r = Independent(Normal(self.r_b1 * a, torch.exp(self.r_b2 * a), validate_args=False), 1)
        return (kl_w + log_qz - r.log_prob(z)).mean()
