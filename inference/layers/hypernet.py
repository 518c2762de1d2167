"""Bayesian hypernetwork over a weight-normalised MLP.

Seed: 004_22b7c09145613257.txt Sec. 3.5 (Krueger et al. 2017): noise eps ~ N(0, I) goes through an
invertible hypernetwork h (so -log q is computable); weight-norm parameterisation ``theta_j = g_j v_j/||v_j||``
with the scales g from the hypernetwork and the directions v maximum-likelihood (point) estimates.

Choices where the seed is silent: h is an IAF flow (``inference.flows.iaf_flow``) over all scales of all
layers jointly; biases are point estimates; the prior on the scales is N(0, prior_sigma^2) elementwise
(KL by Monte Carlo, ``log q(g) - log p(g)``); one scale draw per forward call, shared by the minibatch.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributions import Normal

from inference.flows import iaf_flow

__all__ = ["BayesianHypernetMLP"]


class BayesianHypernetMLP(nn.Module):
    """MLP ``sizes[0] -> ... -> sizes[-1]`` (activation between layers) whose weight-norm scales g ~ q(g)."""

    def __init__(self, sizes: Sequence[int], activation: type[nn.Module] = nn.ReLU, flow_steps: int = 2,
                 flow_hidden: int = 64, prior_sigma: float = 1.0):
        super().__init__()
        if len(sizes) < 2 or min(sizes) < 1:
            raise ValueError(f"sizes must list >= 2 positive layer widths, got {list(sizes)}.")
        self.sizes = list(sizes)
        self.directions = nn.ParameterList(nn.Parameter(torch.randn(o, i) / i ** 0.5)
                                           for i, o in zip(sizes[:-1], sizes[1:]))
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(o)) for o in sizes[1:])
        self.activation = activation()
        n_scales = sum(sizes[1:])
        self.hyper = iaf_flow(n_scales, flow_steps, hidden=flow_hidden) if n_scales >= 2 else None
        if self.hyper is None:
            raise ValueError("the hypernetwork needs at least 2 output units in total.")
        with torch.no_grad():            # start near g = 1 (unit-norm rows), small spread
            self.hyper.base.loc.fill_(1.0)
            self.hyper.base.raw_scale.fill_(-4.0)
        self.register_buffer("prior_sigma", torch.tensor(float(prior_sigma)))

    def weights(self, g: Tensor) -> list[Tensor]:
        """theta_j = g_j v_j / ||v_j|| for every layer (rows = units' input weights)."""
        out, start = [], 0
        for v in self.directions:
            n = v.shape[0]
            out.append(g[start:start + n, None] * v / v.norm(dim=1, keepdim=True))
            start += n
        return out

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.sizes[0]:
            raise ValueError(f"expected input [..., {self.sizes[0]}], got {tuple(x.shape)}.")
        ws = self.weights(self.hyper().rsample())
        for k, (w, b) in enumerate(zip(ws, self.biases)):
            x = F.linear(x, w, b)
            if k < len(ws) - 1:
                x = self.activation(x)
        return x

    def kl(self, n_samples: int = 1) -> Tensor:
        q = self.hyper()
        g = q.rsample((n_samples,))
        prior = Normal(torch.zeros_like(self.prior_sigma), self.prior_sigma, validate_args=False)
        return (q.log_prob(g) - prior.log_prob(g).sum(-1)).mean()
