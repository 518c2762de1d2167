"""Rare-event probabilities by adaptive multi-level splitting (AMLS) with the P_min termination.

Seed 003 Ch 5 (Webb, Rainforth, Teh, Kumar, ICLR 2019; extraction ``../shared/research/seed003.md`` §4): for an
input model p(x) and a property s(x), estimate I = P_{X~p}(s(X) >= 0) (2) through the levels
-inf = L_0 < L_1 < ... < L_K = 0, I = prod_k P(s >= L_k | s >= L_{k-1}) (5), each factor estimated from N samples of
pi_{k-1} ∝ p(x) 1[s(x) >= L_{k-1}] (6). Ch5-Alg1, batched over the N samples:

1. x_1..N ~ p; log I = 0;
2. L_k = min(0, the floor(rho N)-th largest s); P_k = #{s >= L_k} / N; log I += log P_k;
3. if log I < log P_min: stop with I = 0 (-inf): the event is rarer than P_min (the estimate can only fall further:
   it is non-increasing, which is what justifies stopping); a level that does not rise above the last one (the
   chains sit on a plateau of s, e.g. at the maximum of a score that never reaches 0) keeps only points strictly
   above it, and stops with I = 0 when there are none (the seed assumes distinct property values);
4. if L_k = 0: return log I and the survivors (samples of p restricted to the event, (4));
5. else resample N points from the survivors and move *every* one with M Metropolis-Hastings steps targeting
   p(x) 1[s(x) >= L_k] (App. A, eq 7) -- a symmetric random walk, uniform in a cube of half-width eps per chain,
   eps adapted per chain after the M steps: halved if its acceptance rate was below 0.234, times 1.02 if above
   (App. B) -- and go to 2.

The input model is given as ``sample(n, generator)`` and ``log_density(x)`` (-inf outside its support, e.g. a box),
the property as ``score(x) -> [N]``. ``gaussian_model`` and ``box_model`` build the two the seed uses.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor

__all__ = ["AMLSResult", "amls", "gaussian_model", "box_model", "TARGET_ACCEPTANCE"]

TARGET_ACCEPTANCE = 0.234


@dataclass
class AMLSResult:
    log_probability: float          # log I; -inf when it fell below log P_min (reported as I = 0)
    samples: Tensor                 # points with s >= 0 (samples of p restricted to the event); empty if none
    levels: list[float] = field(default_factory=list)          # L_1, ..., L_K
    log_history: list[float] = field(default_factory=list)     # the running log I after each level
    acceptance: list[float] = field(default_factory=list)      # mean MH acceptance rate at each level
    terminated: bool = False        # stopped by P_min
    points: Tensor | None = None    # the last population (when I = 0: the nearest misses found) ...
    scores: Tensor | None = None    # ... and its scores

    @property
    def probability(self) -> float:
        return math.exp(self.log_probability) if self.log_probability > -math.inf else 0.0


def gaussian_model(dim: int, dtype=torch.float64):
    """p(x) = N(0, I_dim): (sample, log_density)."""
    def sample(n: int, generator: torch.Generator | None = None) -> Tensor:
        return torch.randn(n, dim, generator=generator, dtype=dtype)

    def log_density(x: Tensor) -> Tensor:
        return -0.5 * (x * x).sum(-1)
    return sample, log_density


def box_model(low: Tensor, high: Tensor):
    """p(x) uniform on the box [low, high] (the seed's input model for properties of networks)."""
    low, high = torch.as_tensor(low, dtype=torch.float64), torch.as_tensor(high, dtype=torch.float64)

    def sample(n: int, generator: torch.Generator | None = None) -> Tensor:
        return low + (high - low) * torch.rand(n, len(low), generator=generator, dtype=low.dtype)

    def log_density(x: Tensor) -> Tensor:
        inside = ((x >= low) & (x <= high)).all(-1)
        return torch.where(inside, torch.zeros((), dtype=x.dtype), torch.full((), -math.inf, dtype=x.dtype))
    return sample, log_density


def _checked_score(score: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """s(x) [N], or one ValueError naming the problem (NaN, a wrong shape): AMLS's levels need real numbers."""
    s = score(x)
    if not isinstance(s, Tensor) or s.shape != x.shape[:1]:
        shape = tuple(s.shape) if isinstance(s, Tensor) else type(s).__name__
        raise ValueError(f"the score function must map points [N, d] to a tensor [N]; got {shape} for "
                         f"{tuple(x.shape)}")
    if bool(torch.isnan(s).any()):
        raise ValueError(f"the score function returned NaN at {int(torch.isnan(s).sum())} of {len(s)} points; "
                         "make s finite (or -inf) everywhere the input model has mass")
    return s


def amls(sample: Callable[[int, torch.Generator | None], Tensor], log_density: Callable[[Tensor], Tensor],
         score: Callable[[Tensor], Tensor], n: int = 1000, rho: float = 0.1, mh_steps: int = 100,
         log_p_min: float = -250.0, initial_step: float = 0.5, max_levels: int = 10_000,
         generator: torch.Generator | None = None) -> AMLSResult:
    """Ch5-Alg1 (module docstring). ``initial_step``: the random walk's starting half-width eps for every chain."""
    if not 0.0 < rho < 1.0:
        raise ValueError(f"rho must be in (0, 1), got {rho}")
    if n < 2 or int(math.floor(rho * n)) < 1:
        raise ValueError(f"need N >= 2 with floor(rho N) >= 1, got N={n}, rho={rho}")
    if mh_steps < 1 or not initial_step > 0:
        raise ValueError("mh_steps must be >= 1 and initial_step > 0")
    x = sample(n, generator)
    s = _checked_score(score, x)
    eps = torch.full((n,), float(initial_step), dtype=x.dtype)
    result = AMLSResult(0.0, x[:0])
    log_i, rank = 0.0, int(math.floor(rho * n))
    for _ in range(max_levels):
        level = min(0.0, float(torch.sort(s, descending=True).values[rank - 1]))
        survivors = s >= level
        if result.levels and level <= result.levels[-1] and level < 0.0:
            # no progress: the chains sit on a plateau of s (e.g. the maximum of a bounded score, an event that
            # cannot happen); only points strictly above it move on -- none left means I = 0, as with P_min
            survivors = s > level
            if not survivors.any():
                result.points, result.scores = x, s
                result.levels.append(level)
                result.log_history.append(-math.inf)
                result.log_probability, result.terminated = -math.inf, True
                return result
        log_i += math.log(float(survivors.sum()) / n)
        result.levels.append(level)
        result.log_history.append(log_i)
        result.points, result.scores = x, s
        if log_i < log_p_min:
            result.log_probability, result.terminated = -math.inf, True
            return result
        if level >= 0.0:
            result.log_probability, result.samples = log_i, x[survivors]
            return result
        # resample N from the survivors, then M MH steps on every chain, targeting p(x) 1[s(x) >= level]
        pick = torch.nonzero(survivors).ravel()
        pick = pick[torch.randint(len(pick), (n,), generator=generator)]
        x, s, eps = x[pick], s[pick], eps[pick]
        log_p = log_density(x)
        accepted = torch.zeros(n, dtype=x.dtype)
        for _ in range(mh_steps):
            step = (2 * torch.rand(x.shape, generator=generator, dtype=x.dtype) - 1) * eps[:, None]
            proposal = x + step
            proposal_log_p = log_density(proposal)
            log_u = torch.log(torch.rand(n, generator=generator, dtype=x.dtype))
            # symmetric proposal: g cancels; s is evaluated only where the density test passes (a rollout saved
            # for each proposal the density rejects anyway)
            passes = log_u < proposal_log_p - log_p
            proposal_s = torch.full_like(s, -math.inf)
            if passes.any():
                proposal_s[passes] = _checked_score(score, proposal[passes]).to(s.dtype)
            accept = passes & (proposal_s >= level)
            x = torch.where(accept[:, None], proposal, x)
            s = torch.where(accept, proposal_s, s)
            log_p = torch.where(accept, proposal_log_p, log_p)
            accepted += accept.to(x.dtype)
        rate = accepted / mh_steps
        result.acceptance.append(float(rate.mean()))
        eps = torch.where(rate < TARGET_ACCEPTANCE, 0.5 * eps, 1.02 * eps)
    raise RuntimeError(f"AMLS did not reach s >= 0 within {max_levels} levels; raise log_p_min or max_levels")
