"""Kinetic energies shared by HMC, relativistic HMC and the stochastic-gradient kernels.

* ``GaussianKinetic``: K(p) = p^T M^{-1} p / 2 with a diagonal (or identity) mass, seed 002 Sec. 2.1 / seed 000 (2.19).
* ``RelativisticKinetic``: the independent-momenta relativistic kinetic energy of seed 000_02c29175254ceb0c.txt
  eq (3.4), K(p) = sum_j m_j c_j^2 (p_j^2 / (m_j^2 c_j^2) + 1)^{1/2}, with velocity (3.8)
  dK/dp_j = p_j / M_j(p), M_j(p) = (p_j^2 / c_j^2 + m_j^2)^{1/2}, so every speed |v_j| < c_j.

Each kinetic energy exposes what the kernels need: ``sample`` (exact draw from ∝ exp(-K)), ``energy``,
``velocity`` (grad K) and ``laplacian`` (sum_j d^2K/dp_j^2, used by the Nosé-Hoover thermostat).

Exact relativistic momentum sampling.  Per coordinate the density is ∝ exp(-h(p)) with
h(p) = c sqrt(p^2 + m^2 c^2) - m c^2, convex and symmetric with h(0) = 0 (a hyperbolic distribution; the thesis
used adaptive rejection sampling).  We use rejection sampling from the envelope that is flat (= 1) on
|p| <= p0 and exp(-1 - s(|p| - p0)) beyond, where h(p0) = 1 and s = h'(p0): it lies above exp(-h) because h >= 0
and h lies above its tangent at p0.  Solving gives p0 = sqrt(1 + 2 m c^2)/c and s = c^2 p0/(1 + m c^2); the
acceptance rate is above 70% from the Newtonian (m c^2 >> 1) to the ultra-relativistic (m c^2 << 1) regime.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor


class GaussianKinetic:
    """K(p) = 0.5 sum_j p_j^2 / m_j, i.e. a diagonal mass; ``inverse_mass`` is None (identity), [d] or [chains, d]."""

    def __init__(self, inverse_mass: Optional[Tensor] = None):
        if inverse_mass is not None:
            inverse_mass = torch.as_tensor(inverse_mass)
            if not bool((inverse_mass > 0).all()) or not bool(torch.isfinite(inverse_mass).all()):
                raise ValueError("GaussianKinetic: inverse_mass must be positive and finite")
        self.inverse_mass = inverse_mass

    def _inv(self, p: Tensor) -> Tensor | float:
        return 1.0 if self.inverse_mass is None else self.inverse_mass.to(p)

    def sample(self, like: Tensor, generator: Optional[torch.Generator]) -> Tensor:
        z = torch.randn(like.shape, generator=generator, dtype=like.dtype, device=like.device)
        return z if self.inverse_mass is None else z * torch.rsqrt(self._inv(like))

    def energy(self, p: Tensor) -> Tensor:
        return 0.5 * (p * p * self._inv(p)).sum(-1)

    def velocity(self, p: Tensor) -> Tensor:
        return p * self._inv(p) if self.inverse_mass is not None else p

    def laplacian(self, p: Tensor) -> Tensor:
        return torch.ones_like(p).mul(self._inv(p)).sum(-1)


class RelativisticKinetic:
    """Independent-momenta relativistic kinetic energy (seed 000 eq 3.4); ``mass`` and ``c`` are floats or [d]."""

    def __init__(self, mass: float | Tensor = 1.0, c: float | Tensor = 1.0):
        mass, c = torch.as_tensor(mass, dtype=torch.float64), torch.as_tensor(c, dtype=torch.float64)
        if not bool((mass > 0).all()) or not bool((c > 0).all()):
            raise ValueError(f"RelativisticKinetic: mass and c must be positive, got mass={mass}, c={c}")
        self.mass, self.c = mass, c

    def _mc(self, p: Tensor) -> tuple[Tensor, Tensor]:
        return self.mass.to(p), self.c.to(p)

    def _rel_mass(self, p: Tensor) -> Tensor:          # M_j(p) = sqrt(p_j^2/c_j^2 + m_j^2)
        m, c = self._mc(p)
        return torch.sqrt(p * p / (c * c) + m * m)

    def energy(self, p: Tensor) -> Tensor:              # sum_j c_j sqrt(p_j^2 + m_j^2 c_j^2) = sum_j c_j^2 M_j
        _, c = self._mc(p)
        return (c * c * self._rel_mass(p)).sum(-1)

    def velocity(self, p: Tensor) -> Tensor:            # (3.8)
        return p / self._rel_mass(p)

    def laplacian(self, p: Tensor) -> Tensor:           # sum_j 1/M_j - p_j^2 / (c_j^2 M_j^3)
        _, c = self._mc(p)
        mj = self._rel_mass(p)
        return (1.0 / mj - p * p / (c * c * mj ** 3)).sum(-1)

    def sample(self, like: Tensor, generator: Optional[torch.Generator]) -> Tensor:
        return sample_relativistic_momentum(like.shape, self.mass, self.c, generator, like.dtype, like.device)


def sample_relativistic_momentum(shape, mass, c, generator: Optional[torch.Generator] = None,
                                 dtype: torch.dtype = torch.float64, device: torch.device | str = "cpu",
                                 max_rounds: int = 200) -> Tensor:
    """Exact draws from ∝ exp(-c sqrt(p^2 + m^2 c^2)) per coordinate by rejection (see module docstring)."""
    shape = tuple(shape)
    numel = math.prod(shape)
    m = torch.as_tensor(mass, dtype=torch.float64, device=device)
    cc = torch.as_tensor(c, dtype=torch.float64, device=device)
    if m.numel() > 1 or cc.numel() > 1:                    # per-coordinate values: one per draw
        m, cc = m.expand(shape).reshape(-1), cc.expand(shape).reshape(-1)
    p0 = torch.sqrt(1 + 2 * m * cc * cc) / cc
    s = cc * cc * p0 / (1 + m * cc * cc)
    flat_share = (2 * p0) / (2 * p0 + 2 * math.exp(-1.0) / s)

    def pick(t: Tensor, idx: Optional[Tensor]) -> Tensor:  # scalars broadcast, vectors follow the undecided draws
        return t if t.numel() == 1 or idx is None else t[idx]

    out = torch.zeros(numel, dtype=torch.float64, device=device)
    todo = None                                            # None = all draws; then only the rejected are redrawn
    for _ in range(max_rounds):
        n = numel if todo is None else todo.numel()
        u = torch.rand((4, n), generator=generator, dtype=torch.float64, device=device)
        mi, ci, p0i, si = pick(m, todo), pick(cc, todo), pick(p0, todo), pick(s, todo)
        flat = u[0] < pick(flat_share, todo)
        mag = torch.where(flat, u[1] * p0i, p0i - torch.log1p(-u[1]) / si)
        log_env = torch.where(flat, 0.0, -1 - si * (mag - p0i))
        h = ci * mag * mag / (torch.sqrt(mag * mag + mi * mi * ci * ci) + mi * ci)   # = c sqrt(p^2+m^2c^2) - m c^2
        accept = torch.log(u[2]) < -h - log_env
        value = torch.where(u[3] < 0.5, -mag, mag)
        if todo is None:
            out = torch.where(accept, value, out)
            todo = (~accept).nonzero().squeeze(-1)
        else:
            out[todo[accept]] = value[accept]
            todo = todo[~accept]
        if todo.numel() == 0:
            return out.reshape(shape).to(dtype)
    raise RuntimeError("relativistic momentum sampler did not finish; check mass and c")
