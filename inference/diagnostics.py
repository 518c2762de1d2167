"""MCMC diagnostics in torch: bulk/tail ESS and rank-normalised split R-hat, acceptance/divergence summaries.

Standard forms (Vehtari, Gelman, Simpson, Carpenter and Bürkner 2021, "Rank-normalization, folding, and
localization"), the ESS estimator the seeds cite only by reference (seed 002 Table 2.1 cites Gelman et al. 2013):
* split chains in halves (the middle draw of an odd-length chain is dropped);
* rank-normalise: z = Phi^{-1}((rank - 3/8) / (S + 1/4)) over all draws, with average ranks for ties;
* ESS from the FFT autocovariance with Geyer's initial positive and initial monotone sequences,
  tau = -1 + 2 sum rho_t (+ the last positive even lag), floored at 1/log10(S);
* bulk ESS = ESS of the rank-normalised split chains; tail ESS = min of the ESS of the indicators
  I(x <= q_0.05), I(x <= q_0.95) (type-7 quantiles);
* R-hat = max(split R-hat of the rank-normalised draws, split R-hat of the rank-normalised |x - median|).
These match ArviZ's ``ess(method="bulk"|"tail")`` and ``rhat(method="rank")`` (checked in the tests).

Samples are ``[chains, draws]`` or ``[chains, draws, *shape]`` (ArviZ order); results have shape ``*shape``.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor


def _as_draws(samples: Tensor, min_draws: int = 4) -> tuple[Tensor, tuple]:
    x = torch.as_tensor(samples)
    if x.ndim < 2:
        raise ValueError(f"samples must be [chains, draws, ...] (use x[None] for one chain), got {tuple(x.shape)}")
    if x.shape[1] < min_draws:
        raise ValueError(f"need at least {min_draws} draws per chain, got {x.shape[1]}")
    shape = tuple(x.shape[2:])
    x = x.to(torch.float64).reshape(x.shape[0], x.shape[1], -1).permute(2, 0, 1)   # [P, chains, draws]
    return x, shape


def _split(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat([x[..., :half], x[..., -half:]], -2)


def _rank_normalise(x: Tensor) -> Tensor:
    """Blom-offset normal scores of average ranks over all chains and draws (per parameter)."""
    p, c, n = x.shape
    flat = x.reshape(p, -1)
    s = flat.shape[1]
    order = flat.argsort(-1)
    sorted_x = flat.gather(-1, order)
    pos = torch.arange(1, s + 1, dtype=torch.float64, device=x.device).expand(p, s)
    # average ranks over ties: group equal consecutive sorted values
    new_group = torch.ones_like(sorted_x, dtype=torch.bool)
    new_group[:, 1:] = sorted_x[:, 1:] != sorted_x[:, :-1]
    gid = new_group.cumsum(-1) - 1
    sums = torch.zeros_like(pos).scatter_add_(-1, gid, pos)
    counts = torch.zeros_like(pos).scatter_add_(-1, gid, torch.ones_like(pos))
    avg_rank_sorted = (sums / counts.clamp(min=1)).gather(-1, gid)
    ranks = torch.empty_like(avg_rank_sorted).scatter_(-1, order, avg_rank_sorted)
    u = (ranks - 0.375) / (s + 0.25)
    return (math.sqrt(2.0) * torch.special.erfinv(2 * u - 1)).reshape(p, c, n)


def _autocov(x: Tensor) -> Tensor:
    """Biased autocovariance per chain by FFT, [P, chains, draws]."""
    n = x.shape[-1]
    xc = x - x.mean(-1, keepdim=True)
    m = 1 << (2 * n - 1).bit_length()
    f = torch.fft.rfft(xc, n=m)
    return torch.fft.irfft(f * f.conj(), n=m)[..., :n] / n


def _ess(x: Tensor) -> Tensor:
    """ESS per parameter of [P, chains, draws] (Geyer initial monotone sequence)."""
    p, c, n = x.shape
    out = torch.empty(p, dtype=torch.float64, device=x.device)
    const = (x.amax((-1, -2)) - x.amin((-1, -2))) < torch.finfo(torch.float64).resolution
    acov = _autocov(x)
    mean_var = acov[:, :, 0].mean(-1) * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n
    if c > 1:
        var_plus = var_plus + x.mean(-1).var(-1, unbiased=True)
    rho = (1.0 - (mean_var.unsqueeze(-1) - acov.mean(1)) / var_plus.unsqueeze(-1)).cpu()   # [P, n]
    mv = mean_var.cpu()
    for k in range(p):
        if bool(const[k]):
            out[k] = c * n
            continue
        r = rho[k].clone()
        r[0] = 1.0
        rho_t = torch.zeros(n, dtype=torch.float64)
        rho_t[0], rho_t[1] = 1.0, r[1]
        even, odd = 1.0, r[1].item()
        t = 1
        while t < n - 3 and even + odd > 0.0:                 # initial positive sequence
            even, odd = r[t + 1].item(), r[t + 2].item()
            if even + odd >= 0:
                rho_t[t + 1], rho_t[t + 2] = even, odd
            t += 2
        max_t = t - 2
        if even > 0:
            rho_t[max_t + 1] = even
        t = 1
        while t <= max_t - 2:                                 # initial monotone sequence
            if rho_t[t + 1] + rho_t[t + 2] > rho_t[t - 1] + rho_t[t]:
                rho_t[t + 1] = rho_t[t + 2] = (rho_t[t - 1] + rho_t[t]) / 2.0
            t += 2
        tau = -1.0 + 2.0 * rho_t[: max_t + 1].sum() + rho_t[max_t + 1: max_t + 2].sum()
        tau = max(tau.item(), 1.0 / math.log10(c * n))
        out[k] = c * n / tau if math.isfinite(mv[k].item()) else float("nan")
    return out


def ess_bulk(samples: Tensor) -> Tensor:
    """Bulk effective sample size per parameter."""
    x, shape = _as_draws(samples)
    return _ess(_rank_normalise(_split(x))).reshape(shape)


def ess_tail(samples: Tensor, prob: float = 0.05) -> Tensor:
    """Tail ESS: the smaller ESS of the indicators of the ``prob`` and ``1 - prob`` quantiles."""
    if not 0 < prob < 0.5:
        raise ValueError(f"ess_tail: prob must be in (0, 0.5), got {prob}")
    x, shape = _as_draws(samples)
    flat = x.reshape(x.shape[0], -1)
    out = []
    for q in (prob, 1 - prob):
        qv = torch.quantile(flat, q, dim=-1)                           # type 7, as ArviZ
        out.append(_ess(_split((x <= qv[:, None, None]).to(torch.float64))))
    return torch.minimum(*out).reshape(shape)


def ess_basic(samples: Tensor) -> Tensor:
    """ESS of the mean on the raw split draws (no rank normalisation)."""
    x, shape = _as_draws(samples)
    return _ess(_split(x)).reshape(shape)


def _rhat(x: Tensor) -> Tensor:
    n = x.shape[-1]
    between = n * x.mean(-1).var(-1, unbiased=True)
    within = x.var(-1, unbiased=True).mean(-1)
    return torch.sqrt((between / within + n - 1) / n)


def rhat(samples: Tensor) -> Tensor:
    """Rank-normalised split R-hat (max of bulk and folded); a single chain is split in two halves."""
    x, shape = _as_draws(samples)
    s = _split(x)
    bulk = _rhat(_rank_normalise(s))
    # ArviZ folds around np.median (mean of the two middle values); torch.median returns the lower one
    med = torch.quantile(s.reshape(s.shape[0], -1), 0.5, dim=-1)
    folded = (s - med[:, None, None]).abs()
    return torch.maximum(bulk, _rhat(_rank_normalise(folded))).reshape(shape)


def summary(samples: Tensor, info: Optional[dict] = None) -> dict:
    """Per-parameter mean, sd, bulk/tail ESS, R-hat, plus acceptance/divergence rates from a ``sample`` info dict."""
    x = torch.as_tensor(samples).to(torch.float64)
    out = {
        "mean": x.mean((0, 1)), "sd": x.reshape(-1, *x.shape[2:]).std(0),
        "ess_bulk": ess_bulk(x), "ess_tail": ess_tail(x), "rhat": rhat(x) if x.shape[1] >= 4 else None,
    }
    if info is not None:
        out.update(acceptance_summary(info))
    return out


def acceptance_summary(info: dict) -> dict:
    """Mean acceptance probability, divergence rate and divergent-transition count (overall and per chain)."""
    out = {}
    if "acceptance_rate" in info:
        acc = info["acceptance_rate"].to(torch.float64)
        out["acceptance_mean"] = acc.mean().item()
        out["acceptance_per_chain"] = acc.reshape(acc.shape[0], acc.shape[1], -1).mean((1, 2))
    if "is_divergent" in info:
        div = info["is_divergent"]
        out["divergences"] = int(div.sum())
        out["divergence_rate"] = div.to(torch.float64).mean().item()
    if "num_grad_evals" in info:
        out["num_grad_evals"] = info["num_grad_evals"]
    return out
