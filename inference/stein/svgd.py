"""Stein variational gradient descent, seed 002_c38d9063238be78e.txt Sec. 3.2, Algorithm 3.1 and (3.14)-(3.16).

phi(x_i) = (1/N) sum_j [ k(x_j, x_i) grad log p(x_j) + grad_{x_j} k(x_j, x_i) ]                       (Alg. 3.1)
With the RBF kernel k = exp(-||x - y||^2 / h): grad_{x_j} k(x_j, x_i) = -(2/h)(x_j - x_i) k(x_j, x_i), so the
repulsive sum is (2/h)(x_i sum_j k_ij - sum_j k_ij x_j), computed in closed form (O(N^2 d), no autograd).
Updates x <- x + eps phi (plain) or feed -phi to Adam as a gradient (the seed stabilises the flow with Adam).
With one particle the repulsion vanishes and SVGD is gradient ascent on log p (MAP), as the seed notes.

``svgd_direction`` is batched over leading dimensions ([..., N, d]) so a soft-Q agent can run one particle set
per state.  Scores are passed in, so any score source works (autograd of a log density, a critic, an estimator).
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import torch
from torch import Tensor

from .kernels import RBF


def _check_particles(particles: Tensor, score: Optional[Tensor] = None) -> None:
    if not isinstance(particles, Tensor) or particles.ndim < 2:
        raise ValueError(f"particles must be a [..., N, d] tensor, got "
                         f"{tuple(particles.shape) if isinstance(particles, Tensor) else type(particles).__name__}")
    if score is not None and score.shape != particles.shape:
        raise ValueError(f"score must match particles' shape {tuple(particles.shape)}, got {tuple(score.shape)}")


def svgd_direction(particles: Tensor, score: Tensor, kernel: Optional[RBF] = None) -> Tensor:
    """The SVGD update direction phi for every particle (Alg. 3.1); particles and score are [..., N, d]."""
    _check_particles(particles, score)
    kernel = RBF() if kernel is None else kernel
    x = particles.detach()
    h = kernel.h(x)
    k = kernel(x, x, h)                                                    # [..., N, N], symmetric
    drive = k @ score.detach()
    repulse = (2.0 / h)[..., None, None] * (x * k.sum(-1, keepdim=True) - k @ x)
    return (drive + repulse) / x.shape[-2]


def score_fn(logdensity: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """grad log p by autograd for a batched log density."""
    def score(x: Tensor) -> Tensor:
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(logdensity(x).sum(), x)
        return g
    return score


class SVGDState(NamedTuple):
    particles: Tensor
    optimizer: Optional[torch.optim.Optimizer]


def init(particles: Tensor, step_size: float = 0.1, optimizer: str = "adam") -> SVGDState:
    """``optimizer``: "adam" (seed 002's choice, lr = step_size) or "sgd" (plain x += eps phi)."""
    _check_particles(particles)
    if not step_size > 0:
        raise ValueError(f"step_size must be positive, got {step_size}")
    x = particles.detach().clone().requires_grad_(True)
    if optimizer == "adam":
        opt = torch.optim.Adam([x], lr=step_size)
    elif optimizer == "sgd":
        opt = torch.optim.SGD([x], lr=step_size)
    else:
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    return SVGDState(x, opt)


def step(state: SVGDState, score: Callable[[Tensor], Tensor], kernel: Optional[RBF] = None) -> tuple[SVGDState, Tensor]:
    """One SVGD step; returns the new state and the direction phi (its norm is a convergence signal)."""
    x = state.particles
    phi = svgd_direction(x.detach(), score(x.detach()), kernel)
    state.optimizer.zero_grad(set_to_none=True)
    x.grad = -phi                                     # ascent on the KL decrease (3.13)
    state.optimizer.step()
    return state, phi


def run(logdensity: Callable[[Tensor], Tensor], particles: Tensor, num_steps: int, step_size: float = 0.1,
        optimizer: str = "adam", kernel: Optional[RBF] = None,
        callback: Optional[Callable[[int, Tensor], None]] = None) -> Tensor:
    """Run SVGD for ``num_steps`` and return the final particles (detached)."""
    if num_steps < 0:
        raise ValueError(f"num_steps must be >= 0, got {num_steps}")
    state = init(particles, step_size, optimizer)
    score = score_fn(logdensity)
    for t in range(num_steps):
        state, _ = step(state, score, kernel)
        if callback is not None:
            callback(t, state.particles.detach())
    return state.particles.detach()
