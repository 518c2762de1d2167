"""Warm-up for HMC: step-size dual averaging and windowed diagonal-mass adaptation.

The seeds only give fixed values (seed 002: tau = 10, eps = 0.1 and Neal's eps * L = 1 rule), so these are the
standard forms, not seed equations:
* dual averaging of Hoffman & Gelman (2014, Alg. 5) with gamma = 0.05, t0 = 10, kappa = 0.75,
  mu = log(10 eps0), targeting a mean acceptance probability (default 0.8);
* Stan's windowed schedule: a fast step-size-only phase (15% of warm-up), slow windows doubling in length
  (from 25 steps) that estimate the diagonal of the posterior covariance, and a final fast phase (10%).
  The variance estimate is pooled over chains (one shared mass matrix, one shared step size driven by the
  chains' mean acceptance) and shrunk as in Stan: var * n/(n+5) + 1e-3 * 5/(n+5).
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from . import hmc
from .kinetic import GaussianKinetic


class DualAveragingState(NamedTuple):
    log_step: Tensor
    log_step_avg: Tensor
    h_bar: Tensor
    mu: Tensor
    count: int


def dual_averaging_init(step_size, like: Optional[Tensor] = None) -> DualAveragingState:
    eps = torch.as_tensor(step_size, dtype=torch.float64 if like is None else like.dtype,
                          device=None if like is None else like.device)
    if not bool((eps > 0).all()):
        raise ValueError(f"dual averaging: initial step size must be positive, got {step_size}")
    z = torch.zeros_like(eps)
    return DualAveragingState(torch.log(eps), z, z, torch.log(10 * eps), 0)


def dual_averaging_update(state: DualAveragingState, accept_prob: Tensor, target_accept: float = 0.8,
                          gamma: float = 0.05, t0: float = 10.0, kappa: float = 0.75) -> DualAveragingState:
    """One dual-averaging update from the observed acceptance probability (scalar or per chain)."""
    t = state.count + 1
    w = 1.0 / (t + t0)
    h_bar = (1 - w) * state.h_bar + w * (target_accept - accept_prob.to(state.h_bar))
    log_step = state.mu - math.sqrt(t) / gamma * h_bar
    eta = t ** (-kappa)
    log_step_avg = eta * log_step + (1 - eta) * state.log_step_avg
    return DualAveragingState(log_step, log_step_avg, h_bar, state.mu, t)


class WarmupResult(NamedTuple):
    state: hmc.HMCState
    step_size: float
    inverse_mass: Optional[Tensor]     # [d], None when the mass was not adapted
    acceptance: float                  # mean acceptance over the final fast phase


def schedule(num_warmup: int) -> list[tuple[int, int]]:
    """Stan-style slow windows as (start, end) step indices; empty when warm-up is too short."""
    if num_warmup < 20:
        return []
    init_buf, term_buf = int(0.15 * num_warmup), int(0.1 * num_warmup)
    windows, start, size = [], init_buf, 25
    end_slow = num_warmup - term_buf
    while start < end_slow:
        end = start + size
        if end + 2 * size > end_slow:          # the last window absorbs what is left
            end = end_slow
        windows.append((start, end))
        start, size = end, 2 * size
    return windows


def window_adaptation(logdensity, position: Tensor, generator: Optional[torch.Generator], num_warmup: int,
                      num_steps: int = 10, target_accept: float = 0.8, initial_step_size: float = 0.1,
                      adapt_mass: bool = True, kinetic=None, algorithm=None, **settings) -> WarmupResult:
    """Warm up chains: returns the last state, the tuned step size and the diagonal inverse mass.

    ``algorithm``: a sampler module with ``build(logdensity, step_size, kinetic=..., **settings) -> Kernel`` (default
    ``hmc`` with ``num_steps``; e.g. ``nuts`` with ``max_depth``). With ``adapt_mass=False`` only the step size is
    tuned and ``kinetic`` (e.g. ``RelativisticKinetic``) is used as given; with ``adapt_mass=True`` the kinetic
    energy is the adapted diagonal Gaussian.
    """
    if algorithm is None:
        algorithm, settings = hmc, {"num_steps": num_steps, **settings}
    if num_warmup < 1:
        raise ValueError(f"num_warmup must be >= 1, got {num_warmup}")
    if settings.get("compile"):   # every warm-up step has a new step size, so a new kernel: it would recompile each
        raise ValueError("window_adaptation runs eager kernels: drop compile=True here and pass it to build() for "
                         "the sampling after the warm-up")
    if adapt_mass and kinetic is not None:
        raise ValueError("adapt_mass=True adapts a Gaussian kinetic energy; pass kinetic only with adapt_mass=False")
    state = hmc.init(position, logdensity)
    windows = schedule(num_warmup) if adapt_mass else []
    ends = {end: start for start, end in windows}
    inv_mass = None
    kin = kinetic if kinetic is not None else GaussianKinetic()
    da = dual_averaging_init(initial_step_size, state.log_density.new_tensor(0.0))
    sums = None
    tail_acc, tail_n = 0.0, 0
    for t in range(num_warmup):
        kernel = algorithm.build(logdensity, torch.exp(da.log_step).item(), kinetic=kin, **settings)
        state, info = kernel.step(state, generator)
        acc = info.acceptance_rate.mean()
        da = dual_averaging_update(da, acc, target_accept)
        if any(s <= t < e for s, e in windows):
            x = state.position
            sums = (x.sum(0), (x * x).sum(0), x.shape[0]) if sums is None else \
                (sums[0] + x.sum(0), sums[1] + (x * x).sum(0), sums[2] + x.shape[0])
        if t + 1 in ends:                        # end of a slow window: new mass, restart the step size
            s1, s2, n = sums
            var = (s2 - s1 * s1 / n) / (n - 1)
            inv_mass = var * (n / (n + 5.0)) + 1e-3 * (5.0 / (n + 5.0))
            kin = GaussianKinetic(inv_mass)
            da = dual_averaging_init(torch.exp(da.log_step_avg).item(), state.log_density.new_tensor(0.0))
            sums = None
        if t >= num_warmup - max(1, int(0.1 * num_warmup)):
            tail_acc, tail_n = tail_acc + acc.item(), tail_n + 1
    step_size = torch.exp(da.log_step_avg if da.count > 0 else da.log_step).item()
    return WarmupResult(state, step_size, inv_mass, tail_acc / max(tail_n, 1))
