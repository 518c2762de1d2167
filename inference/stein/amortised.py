"""Amortised SVGD: a sampler network x = f_theta(z) trained to follow SVGD updates.

Seed 002_c38d9063238be78e.txt Sec. 4.1, Algorithm 4.1, eqs (4.1)-(4.3): draw z_i ~ q, x_i = f_theta(z_i), compute
the SVGD direction Delta x_i (Alg. 3.1) at the samples, and move theta by sum_i d f_theta(z_i)/d theta . Delta x_i
(4.3).  As an autograd surrogate: loss(theta) = -sum_i f_theta(z_i) . stopgrad(Delta x_i), minimised with Adam
(lr 1e-3 in the seed).  The seed's sampler is an MLP with 2 hidden layers of 100 tanh units (``MLPSampler``).

``AttentionSampler`` is the "learning to communicate" sampler of Sec. 4.2, eqs (4.4)-(4.6): the M noise draws of
one batch are the nodes of a complete graph; each node is embedded (4.4), attends to all nodes (4.5) and takes
the attention-weighted sum of their (value-projected) embeddings (4.6), with several heads averaged and several
layers.  Choices where the seed is silent, stated here: f_phi is scaled dot-product attention between learned
query/key projections (a GAT-style additive score a^T[W h_i || W h_j] is constant in i after the softmax on a
complete graph, so node i could not shape its own weights); each layer keeps a residual connection and a tanh;
"neighbourhood sub-sampling" is dropout of attention logits (set to -inf, never the node itself) at rate
``neighbour_dropout`` during training; a linear read-out maps the node state to R^d.

Both samplers accept an optional ``context`` ([..., context_dim], broadcast over the M draws), which is what a
soft-Q-learning policy f(s, z) -> a needs; ``amortised_svgd_step`` is the reusable training step.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import Tensor, nn

from .kernels import RBF
from .svgd import score_fn, svgd_direction


def _with_context(z: Tensor, context: Optional[Tensor], context_dim: int) -> Tensor:
    if context_dim == 0:
        if context is not None:
            raise ValueError("this sampler was built with context_dim=0 but got a context")
        return z
    if context is None or context.shape[-1] != context_dim:
        raise ValueError(f"sampler needs a context of shape [..., {context_dim}]")
    ctx = context.unsqueeze(-2).expand(*z.shape[:-1], context_dim)
    return torch.cat([z, ctx], -1)


class MLPSampler(nn.Module):
    """f_theta(z[, context]) with ``num_layers`` hidden layers (seed 002 Sec. 4.1.1: 2 x 100, tanh)."""

    def __init__(self, noise_dim: int, out_dim: int, hidden: int = 100, num_layers: int = 2,
                 activation: type[nn.Module] = nn.Tanh, context_dim: int = 0):
        super().__init__()
        if min(noise_dim, out_dim, hidden, num_layers) < 1 or context_dim < 0:
            raise ValueError("MLPSampler: dims and num_layers must be positive")
        self.noise_dim, self.out_dim, self.context_dim = noise_dim, out_dim, context_dim
        layers, width = [], noise_dim + context_dim
        for _ in range(num_layers):
            layers += [nn.Linear(width, hidden), activation()]
            width = hidden
        layers.append(nn.Linear(width, out_dim))
        self.net = nn.Sequential(*layers)

    def forward(self, z: Tensor, context: Optional[Tensor] = None) -> Tensor:
        if z.shape[-1] != self.noise_dim:
            raise ValueError(f"MLPSampler: noise must be [..., {self.noise_dim}], got {tuple(z.shape)}")
        return self.net(_with_context(z, context, self.context_dim))


class _AttentionLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, neighbour_dropout: float):
        super().__init__()
        self.heads, self.head_dim, self.p = heads, hidden, neighbour_dropout
        self.qkv = nn.Linear(hidden, 3 * heads * hidden)

    def forward(self, h: Tensor) -> Tensor:
        *lead, m, width = h.shape
        q, k, v = self.qkv(h).reshape(*lead, m, 3, self.heads, self.head_dim).unbind(-3)   # [..., M, H, w]
        logits = torch.einsum("...ihw,...jhw->...hij", q, k) / math.sqrt(self.head_dim)   # (4.5) scores
        if self.training and self.p > 0:                                                 # neighbour sub-sampling
            drop = torch.rand(logits.shape, device=h.device) < self.p
            drop &= ~torch.eye(m, dtype=torch.bool, device=h.device)
            logits = logits.masked_fill(drop, float("-inf"))
        alpha = torch.softmax(logits, -1)
        msg = torch.einsum("...hij,...jhw->...ihw", alpha, v).mean(-2)                  # (4.6), heads averaged
        return torch.tanh(h + msg)


class AttentionSampler(nn.Module):
    """Graph-attention sampler over the M draws of a batch (seed 002 Sec. 4.2); input z is [..., M, noise_dim]."""

    def __init__(self, noise_dim: int, out_dim: int, hidden: int = 64, heads: int = 4, num_layers: int = 2,
                 neighbour_dropout: float = 0.1, context_dim: int = 0):
        super().__init__()
        if min(noise_dim, out_dim, hidden, heads, num_layers) < 1 or not 0 <= neighbour_dropout < 1:
            raise ValueError("AttentionSampler: dims/heads/layers must be positive and 0 <= dropout < 1")
        self.noise_dim, self.out_dim, self.context_dim = noise_dim, out_dim, context_dim
        self.embed = nn.Sequential(nn.Linear(noise_dim + context_dim, hidden), nn.Tanh())      # (4.4)
        self.layers = nn.ModuleList(_AttentionLayer(hidden, heads, neighbour_dropout) for _ in range(num_layers))
        self.readout = nn.Linear(hidden, out_dim)

    def forward(self, z: Tensor, context: Optional[Tensor] = None) -> Tensor:
        if z.ndim < 2 or z.shape[-1] != self.noise_dim:
            raise ValueError(f"AttentionSampler: noise must be [..., M, {self.noise_dim}], got {tuple(z.shape)}")
        h = self.embed(_with_context(z, context, self.context_dim))
        for layer in self.layers:
            h = layer(h)
        return self.readout(h)


def amortised_svgd_loss(samples: Tensor, score: Tensor, kernel: Optional[RBF] = None) -> Tensor:
    """Surrogate whose gradient is -(4.3): -sum_i f_theta(z_i) . stopgrad(Delta x_i), averaged over leading dims."""
    phi = svgd_direction(samples.detach(), score.detach(), kernel)
    return -(samples * phi).sum((-1, -2)).mean()


def amortised_svgd_step(sampler: nn.Module, optimizer: torch.optim.Optimizer, score_fn: Callable[[Tensor], Tensor],
                        noise: Tensor, context: Optional[Tensor] = None,
                        kernel: Optional[RBF] = None) -> dict[str, float]:
    """One step of Algorithm 4.1: samples = sampler(noise[, context]) ([..., M, d]); ``score_fn`` gives grad log p
    at the (detached) samples.  Returns the surrogate loss and the mean SVGD direction norm."""
    samples = sampler(noise, context)
    score = score_fn(samples.detach())
    phi = svgd_direction(samples.detach(), score, kernel)
    loss = -(samples * phi).sum((-1, -2)).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return {"loss": loss.item(), "phi_norm": phi.norm(dim=-1).mean().item()}


def train_amortised_svgd(sampler: nn.Module, logdensity: Callable[[Tensor], Tensor], num_iters: int,
                         batch_size: int = 100, lr: float = 1e-3, generator: Optional[torch.Generator] = None,
                         kernel: Optional[RBF] = None, dtype: torch.dtype = torch.float32) -> list[dict]:
    """Train ``sampler`` (no context) on a target log density with Adam (seed 002: lr 1e-3); q = N(0, I)."""
    if num_iters < 0 or batch_size < 2:
        raise ValueError("need num_iters >= 0 and batch_size >= 2")
    opt = torch.optim.Adam(sampler.parameters(), lr=lr)
    score = score_fn(logdensity)
    device = next(sampler.parameters()).device
    history = []
    for _ in range(num_iters):
        z = torch.randn(batch_size, sampler.noise_dim, generator=generator, dtype=dtype, device=device)
        history.append(amortised_svgd_step(sampler, opt, score, z, kernel=kernel))
    return history
