"""Parallel tempering (replica exchange) with HMC moves, seed 002_c38d9063238be78e.txt Sec. 2.2, Alg. 2.2.

Corrected forms (the printed ones are typos, see the seed extraction):
* tempered target (2.6): p_T(x) = p(x)^(1/T) (printed with the wrong sign);
* swap acceptance (2.7): min(1, exp((1/T_i - 1/T_j)(log p(x_j) - log p(x_i)))) (printed inside an extra exp).
Ladder T_i = sqrt(2)^i, i = 0..N-1 (``ladder``).  After every chain takes one HMC step on its own tempered
target, adjacent pairs (i-1, i) are offered swaps sequentially for i = 1..N-1, so a swapped state can move again
(Alg. 2.2).  The seed does not say whether the step size depends on T; ``step_size`` may be a scalar or a
per-temperature [N] tensor (``step_size * sqrt(T)`` is a reasonable choice, since the tempered target's scale
grows like sqrt(T) for a Gaussian).

Positions are ``[replicas, temperatures, d]``: several independent ladders run in one batch.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from . import hmc
from .kinetic import GaussianKinetic


class PTState(NamedTuple):
    position: Tensor        # [R, N, d]
    log_density: Tensor     # [R, N], untempered log p
    grad: Tensor            # [R, N, d], untempered grad log p
    inverse_temperature: Tensor   # [N]


class PTInfo(NamedTuple):
    acceptance_rate: Tensor   # [R, N] HMC acceptance per rung
    swap_accepted: Tensor     # [R, N-1] bool, pair (i, i+1)
    swap_prob: Tensor         # [R, N-1]
    is_divergent: Tensor      # [R, N]
    num_grad_evals: int


def ladder(num_temperatures: int, factor: float = math.sqrt(2.0)) -> Tensor:
    if num_temperatures < 1 or factor <= 1:
        raise ValueError("ladder: need num_temperatures >= 1 and factor > 1")
    return factor ** torch.arange(num_temperatures, dtype=torch.float64)


def init(position: Tensor, logdensity, temperatures: Tensor) -> PTState:
    temperatures = torch.as_tensor(temperatures, dtype=position.dtype, device=position.device)
    if position.ndim != 3 or temperatures.ndim != 1 or position.shape[1] != temperatures.shape[0]:
        raise ValueError(f"parallel tempering: position must be [replicas, N, d] with N = len(temperatures); "
                         f"got {tuple(position.shape)} and {tuple(temperatures.shape)}")
    if not bool((temperatures > 0).all()):
        raise ValueError("temperatures must be positive")
    r, n, d = position.shape
    s = hmc.init(position.reshape(r * n, d), logdensity)
    return PTState(s.position.reshape(r, n, d), s.log_density.reshape(r, n), s.grad.reshape(r, n, d),
                   1.0 / temperatures)


def step(state: PTState, generator: Optional[torch.Generator], logdensity, step_size, num_steps: int = 10,
         kinetic=None, transition=None) -> tuple[PTState, PTInfo]:
    """One HMC step per chain on its tempered target, then the swap sweep. ``transition``: the compiled HMC
    transition of the tempered density that ``build(compile=True)`` passes (eager by default)."""
    r, n, d = state.position.shape
    beta = state.inverse_temperature
    beta_flat = beta.repeat(r)                                                  # [R*N], rung-major inside a replica
    eps = torch.as_tensor(step_size, dtype=state.position.dtype, device=state.position.device)
    eps = eps.repeat(r) if eps.ndim == 1 else eps
    flat = hmc.HMCState(state.position.reshape(r * n, d), beta_flat * state.log_density.reshape(-1),
                        beta_flat.unsqueeze(-1) * state.grad.reshape(r * n, d))
    if transition is None:
        flat, info = hmc.step(flat, generator, lambda x: _tempered(logdensity, x, beta_flat), eps, num_steps,
                              kinetic)
    else:
        flat, info = transition(flat, generator, hmc.as_column(eps, flat.position, "step_size"), beta_flat)
    x = flat.position.reshape(r, n, d)
    lp = (flat.log_density / beta_flat).reshape(r, n)                         # back to untempered values
    g = (flat.grad / beta_flat.unsqueeze(-1)).reshape(r, n, d)

    swaps, probs = [], []
    for i in range(1, n):                                                       # Alg. 2.2, sequential sweep
        log_a = (beta[i - 1] - beta[i]) * (lp[:, i] - lp[:, i - 1])            # (2.7), corrected
        prob = torch.exp(torch.clamp(log_a, max=0.0))
        u = torch.rand(prob.shape, generator=generator, dtype=prob.dtype, device=prob.device)
        acc = u < prob
        idx = torch.arange(n, device=x.device).expand(r, n).clone()
        idx[acc, i - 1], idx[acc, i] = i, i - 1
        x = torch.gather(x, 1, idx.unsqueeze(-1).expand(r, n, d))
        g = torch.gather(g, 1, idx.unsqueeze(-1).expand(r, n, d))
        lp = torch.gather(lp, 1, idx)
        swaps.append(acc)
        probs.append(prob)
    empty = torch.zeros(r, 0, dtype=lp.dtype, device=lp.device)
    info = PTInfo(info.acceptance_rate.reshape(r, n),
                  torch.stack(swaps, 1) if swaps else empty.bool(), torch.stack(probs, 1) if probs else empty,
                  info.is_divergent.reshape(r, n), info.num_grad_evals)
    return PTState(x, lp, g, beta), info


def _tempered(logdensity, x: Tensor, beta: Tensor) -> Tensor:
    """(2.6), corrected: log p_T(x) = log p(x) / T, per chain."""
    return beta * logdensity(x)


def build(logdensity, temperatures: Tensor, step_size, num_steps: int = 10, kinetic=None,
          compile: bool = False) -> hmc.Kernel:
    """Parallel tempering with its settings bound: ``state = kernel.init(position [replicas, N, d])``, then
    ``state, info = kernel.step(state, generator)``; bad settings fail here, before any draw. ``compile=True``:
    every chain's HMC trajectory on its tempered target is one compiled graph (``hmc.compiled_transition``), the
    swap sweep stays eager; the same draws as the eager kernel for the same generator."""
    if int(num_steps) != num_steps or num_steps < 1:
        raise ValueError(f"num_steps must be a positive integer, got {num_steps}")
    hmc.check_step_size(step_size)
    temperatures = torch.as_tensor(temperatures)
    if temperatures.ndim != 1 or not bool((temperatures > 0).all()):
        raise ValueError("temperatures must be a 1-d tensor of positive values (e.g. tempering.ladder(8))")

    transition = None
    if compile:
        transition = hmc.compiled_transition(lambda x, beta: _tempered(logdensity, x, beta), int(num_steps),
                                             kinetic or GaussianKinetic(), hmc.DIVERGENCE_THRESHOLD)

    def kernel_step(state: PTState, generator: Optional[torch.Generator] = None):
        return step(state, generator, logdensity, step_size, int(num_steps), kinetic, transition)
    return hmc.Kernel(lambda position: init(position, logdensity, temperatures), kernel_step)
