"""Stochastic natural-gradient EP (SNEP) and the damped-EP / SMS baseline in one process, and the shards and site
update the Ray posterior server (``inference.ep.server``) runs on its workers.

Seed 003 Ch 4 (Hasenclever et al., JMLR 2017; extraction ``../shared/research/seed003.md`` §3.2-3.4) and seed 000
eqs 4.22-4.25. The posterior p(x) ∝ p0(x) exp(sum_i l_i(x)) is split over n workers, worker i holding shard i's
log-likelihood l_i. q(x) = exp((theta_0 + sum_j lambda_j)^T s(x)) (9), lambda_i the site of worker i; the server's
theta_post = theta_0 + sum_j lambda_j. With the Gaussian family of ``expfam.FullGaussian`` (s = (x, x x^T / 2)):

- tilted distribution of worker i (20): p_i ∝ exp((theta'_i - lambda_i / beta_i)^T s(x) + l_i(x) / beta_i);
- SNEP inner update (22), in mean parameters gamma_i with lambda_i = grad A*(gamma_i):
  gamma_i <- gamma_i + eps (E_{p_i}[s(x)] - grad A(theta_post)), the expectation either exact (Gaussian shards) or
  the sufficient statistics of one MCMC state (the seed's "single MCMC state" estimate) or of several;
- outer update (23): theta'_i <- theta_post (every ``outer_every`` inner steps; 1 = the merged update (24));
- damped EP in natural parameters (25), the SMS baseline: lambda_i <- lambda_i + eps (grad A*(E_{p_i}[s]) -
  theta_post) with theta'_i = theta_post, which needs the moments turned back into natural parameters and so breaks
  down when they are estimated from few samples;
- p-SNEP: beta_i = 1 / n (``power="parallel"``), beta_i = 1 is EP's fixed point.

The invariant theta_post = theta_0 + sum_i lambda_i is kept exactly: the server adds each worker's delta
lambda_i^new - lambda_i^old (Alg 8 line 21), ``SNEPState.check_invariant`` verifies it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
from torch import Tensor

from inference.ep.expfam import DiagGaussian, FullGaussian, add

__all__ = ["GaussianShard", "SampledShard", "MinibatchShard", "SNEPState", "init", "snep_round", "sms_round", "posterior",
           "natural_gradient_step", "power_beta"]

Pair = tuple[Tensor, Tensor]


@dataclass
class GaussianShard:
    """A shard whose log-likelihood is Gaussian in x (linear regression, known noise): exact tilted moments.
    l(x) = sum_c log N(y_c; z_c^T x, noise^2) has natural parameters (Z^T y / noise^2, -Z^T Z / noise^2)."""
    features: Tensor
    targets: Tensor
    noise: float

    def __post_init__(self):
        if self.features.ndim != 2 or self.features.shape[0] == 0 or self.targets.shape != self.features.shape[:1]:
            raise ValueError("a shard needs features [n >= 1, d] and targets [n] (a shard with no data cannot "
                             "hold a site)")

    @property
    def natural(self) -> Pair:
        z, y = self.features.double(), self.targets.double()
        return z.T @ y / self.noise ** 2, -(z.T @ z) / self.noise ** 2

    def tilted_mean(self, tilted_natural: Pair, beta: float, generator=None) -> Pair:
        return FullGaussian.mean_from_natural(add(tilted_natural, self.natural, 1.0 / beta))


@dataclass
class SampledShard:
    """A shard with any log-likelihood ``log_lik(x [C, d]) -> [C]``: tilted moments from ``samples`` MCMC draws
    (HMC steps of ``inference.mcmc.hmc`` continuing from the shard's last state, ``chains`` of them) of the
    tilted distribution (20) in ``family`` (``FullGaussian`` or ``DiagGaussian``). ``precondition``: HMC runs in
    coordinates whitened by the tilted distribution's Gaussian part (the cavity, theta'_i - lambda_i / beta_i) when
    that part is a proper Gaussian, so ``step_size`` is relative to the cavity's scale (not in the seed, which uses
    adaptive SGLD on networks; a fixed step cannot follow a posterior that narrows as the sites learn).
    ``target_acceptance``: after every draw the step size moves by exp(0.05 (acceptance - target)), a Robbins-Monro
    adaptation that follows the tilted distribution as it changes (None keeps ``step_size`` fixed)."""
    log_lik: Callable[[Tensor], Tensor]
    dim: int
    samples: int = 1
    chains: int = 1
    step_size: float = 0.05
    leapfrog: int = 5
    state: Optional[Tensor] = None
    family: type = FullGaussian
    precondition: bool = False
    target_acceptance: Optional[float] = None

    def tilted_mean(self, tilted_natural: Pair, beta: float, generator=None) -> Pair:
        from inference.mcmc import hmc

        family = self.family

        def log_p(x):
            return family.inner(tilted_natural, family.sufficient(x)) + self.log_lik(x) / beta
        if self.state is None:
            mean, _ = family.moments_from_natural(tilted_natural)
            self.state = mean.expand(self.chains, self.dim).clone()
        shift, scale = self._whitening(tilted_natural)
        to_x = (lambda u: shift + u * scale) if scale.ndim == 1 else (lambda u: shift + u @ scale.T)
        start = (self.state - shift) / scale if scale.ndim == 1 else \
            torch.linalg.solve_triangular(scale, (self.state - shift).T, upper=False).T
        st = hmc.init(start, lambda u: log_p(to_x(u)))
        draws = []
        for _ in range(self.samples):
            st, info = hmc.step(st, generator, lambda u: log_p(to_x(u)), self.step_size, self.leapfrog)
            draws.append(to_x(st.position))
            if self.target_acceptance is not None:
                self.step_size *= math.exp(0.05 * (float(info.acceptance_rate.mean()) - self.target_acceptance))
        self.state = draws[-1]
        stats = family.sufficient(torch.cat(draws))
        return stats[0].mean(0), stats[1].mean(0)

    def warm_up(self, tilted_natural: Pair, beta: float, draws: int = 100, generator=None) -> None:
        """``draws`` draws whose statistics are discarded: the chain leaves its start and, with
        ``target_acceptance``, the step size adapts before any site update reads a draw. Without it, a chain whose
        first steps are all rejected feeds its start point to SNEP's single-state estimate, and q collapses there."""
        samples, self.samples = self.samples, draws
        try:
            self.tilted_mean(tilted_natural, beta, generator)
        finally:
            self.samples = samples

    def _whitening(self, tilted_natural: Pair) -> Pair:
        """(shift, scale): x = shift + scale u, scale a vector (diagonal) or a lower-triangular matrix."""
        identity = (torch.zeros(self.dim, dtype=tilted_natural[0].dtype), torch.ones(self.dim,
                                                                                     dtype=tilted_natural[0].dtype))
        if not self.precondition:
            return identity
        try:
            mean, cov = self.family.moments_from_natural(tilted_natural)
        except ValueError:           # the cavity is not a proper Gaussian: no whitening
            return identity
        return (mean, cov.sqrt()) if cov.ndim == 1 else (mean, torch.linalg.cholesky(cov))


@dataclass
class MinibatchShard:
    """A shard of ``size`` data points for a model with a flat parameter vector x (a network's weights), in the
    diagonal Gaussian family. Its MCMC kernel is the seed's adaptive SGLD (seed 003 App. B.1, eq 27): one step per
    call on the minibatch gradient of the tilted log density (20),

        g = grad_x [ (theta'_i - lambda_i / beta_i)^T s(x) + (size / |B|) log p(y_B | x) / beta_i ],
        v <- r v + (1 - r) g^2,  M = v / (1 - r^t),  kappa = eps / (sqrt(M) + delta),
        x <- x + kappa g + eta,  eta ~ N(0, 2 kappa), its std capped at eps,

    read as RMSprop-preconditioned SGLD with an element-wise step (the seed's "M^-1 kappa" could be read as
    preconditioning twice; its "1 - beta^2" debias is taken to be Adam's 1 - r^t). The tilted moments are the single
    state's sufficient statistics (eq 22's "single MCMC state" estimate). ``log_lik(x, rows) -> scalar`` sums the
    log-likelihood of data ``rows``; ``state`` starts the chain (e.g. a Xavier initialisation)."""
    log_lik: Callable[[Tensor, Tensor], Tensor]
    size: int
    state: Tensor
    batch: int = 100
    step_size: float = 1e-3       # eps
    decay: float = 0.999          # r
    delta: float = 1e-8
    family: type = DiagGaussian
    _v: Optional[Tensor] = None
    _t: int = 0

    def __post_init__(self):
        if self.size < 1:
            raise ValueError("a shard needs at least one data point (a shard with no data cannot hold a site)")
        if not (self.step_size > 0 and 0 < self.decay < 1 and self.batch >= 1):
            raise ValueError("step_size must be positive, decay in (0, 1) and batch >= 1")

    def tilted_mean(self, tilted_natural: Pair, beta: float, generator=None) -> Pair:
        rows = torch.randint(self.size, (min(self.batch, self.size),), generator=generator)
        x = self.state.detach().reshape(-1).clone().requires_grad_(True)
        log_p = self.family.inner(tilted_natural, self.family.sufficient(x)) \
            + (self.size / len(rows)) * self.log_lik(x, rows) / beta
        if not bool(torch.isfinite(log_p)):
            raise FloatingPointError("the minibatch tilted log density is not finite; lower step_size")
        (g,) = torch.autograd.grad(log_p, x)
        self._t += 1
        self._v = (1 - self.decay) * g * g if self._v is None else self.decay * self._v + (1 - self.decay) * g * g
        kappa = self.step_size / ((self._v / (1 - self.decay ** self._t)).sqrt() + self.delta)
        noise = torch.randn(x.shape, generator=generator, dtype=x.dtype) * (2 * kappa).sqrt().clamp(max=self.step_size)
        new = (x + kappa * g + noise).detach()
        self.state = new
        return self.family.sufficient(new)


@dataclass
class SNEPState:
    theta0: Pair
    sites: list            # lambda_i (natural pairs)
    gammas: list           # gamma_i (mean pairs); SNEP only
    theta_prime: list      # theta'_i
    theta_post: Pair       # the server's copy
    betas: list

    def check_invariant(self, atol: float = 1e-8) -> bool:
        total = self.theta0
        for lam in self.sites:
            total = add(total, lam)
        return all(torch.allclose(a, b, atol=atol) for a, b in zip(total, self.theta_post))


def power_beta(power: str | float, workers: int) -> float:
    """beta_i from a power setting: a positive number, or "parallel" for p-SNEP's 1 / N_workers."""
    beta = 1.0 / workers if power == "parallel" else float(power)
    if not beta > 0:
        raise ValueError(f"power (beta) must be positive or 'parallel', got {power}")
    return beta


def init(prior_mean: Tensor, prior_cov: Tensor, shards: Sequence, site_precision: float = 1e-2,
         power: str | float = 1.0) -> SNEPState:
    """Sites start as broad proper Gaussians N(0, I / site_precision) (their mean parameters must exist)."""
    if not shards:
        raise ValueError("need at least one shard")
    n, d = len(shards), prior_mean.numel()
    beta = power_beta(power, n)
    theta0 = FullGaussian.natural_from_moments(prior_mean.double(), prior_cov.double())
    site = FullGaussian.natural_from_moments(torch.zeros(d, dtype=torch.float64),
                                             torch.eye(d, dtype=torch.float64) / site_precision)
    sites = [tuple(t.clone() for t in site) for _ in range(n)]
    post = theta0
    for lam in sites:
        post = add(post, lam)
    return SNEPState(theta0, sites, [FullGaussian.mean_from_natural(s) for s in sites],
                     [tuple(t.clone() for t in post) for _ in range(n)], post, [beta] * n)


def _push(state: SNEPState, i: int, new_site: Pair) -> None:
    """The worker's delta applied by the server (Alg 8 line 21)."""
    delta = add(new_site, state.sites[i], -1.0)
    state.theta_post = add(state.theta_post, delta)
    state.sites[i] = new_site


def snep_round(state: SNEPState, shards: Sequence, lr: float, outer_every: int = 1, step: int = 0,
               generator: Optional[torch.Generator] = None) -> SNEPState:
    """One inner update (22) on every worker in turn, each pushing its delta; the outer update (23) every
    ``outer_every`` rounds, at each worker's turn (1: the merged update (24))."""
    outer = (step + 1) % outer_every == 0
    for i, shard in enumerate(shards):
        beta = state.betas[i]
        if outer:                     # (23) at the worker's turn: theta'_i := theta_{-i} + lambda_i = theta_post now
            state.theta_prime[i] = tuple(t.clone() for t in state.theta_post)
        tilted = add(state.theta_prime[i], state.sites[i], -1.0 / beta)
        try:
            stats = shard.tilted_mean(tilted, beta, generator)
        except ValueError:            # the tilted distribution is not normalisable: skip this worker's step
            continue
        step = natural_gradient_step(FullGaussian, state.gammas[i], stats, state.theta_post, lr)
        if step is not None:
            state.gammas[i] = step[0]
            _push(state, i, step[1])
    return state


def natural_gradient_step(family, gamma: Pair, tilted_stats: Pair, theta_post: Pair, lr: float,
                          halvings: int = 12) -> Optional[tuple[Pair, Pair]]:
    """SNEP's inner update (22) for one site: gamma + lr (E_tilted[s] - grad A(theta_post)) and its site
    lambda = grad A*(gamma). A step that leaves the mean domain is halved (the seed's damping), up to ``halvings``
    times; None if every one does."""
    direction = add(tilted_stats, family.mean_from_natural(theta_post), -1.0)
    for halving in range(halvings):
        new_gamma = add(gamma, direction, lr / 2 ** halving)
        try:
            return new_gamma, family.natural_from_mean(new_gamma)
        except ValueError:
            continue
    return None


def sms_round(state: SNEPState, shards: Sequence, lr: float,
              generator: Optional[torch.Generator] = None) -> tuple[SNEPState, int]:
    """Damped EP in natural parameters (25) with the cavity theta_post - lambda_i / beta: the SMS baseline.
    Returns the state and the number of updates rejected because the moments had no natural parameters."""
    rejected = 0
    for i, shard in enumerate(shards):
        beta = state.betas[i]
        tilted = add(state.theta_post, state.sites[i], -1.0 / beta)
        try:
            stats = shard.tilted_mean(tilted, beta, generator)
            target = FullGaussian.natural_from_mean(stats)
        except ValueError:
            rejected += 1
            continue
        new_site = add(state.sites[i], add(target, state.theta_post, -1.0), lr)
        _push(state, i, new_site)
    return state, rejected


def posterior(state: SNEPState) -> tuple[Tensor, Tensor]:
    """Mean and covariance of q (the server's theta_post); ValueError if it is not a Gaussian (SMS can leave)."""
    return FullGaussian.moments_from_natural(state.theta_post)
