"""Planar and radial flows.

Seeds: 000_02c29175254ceb0c.txt Ch. 5, (5.8)-(5.9): planar step ``z' = z + u h(w^T z + b)`` with
``det J = 1 + u^T h'(w^T z + b) w``, invertible for h = tanh when ``u^T w >= -1``.  001_dc5bafdce3ec8872.txt
App. B.4.1 (B.25)-(B.27) names planar flows too.  The seeds do not say how ``u^T w >= -1`` is enforced;
the standard reparameterisation of Rezende & Mohamed (2015) is used:
``u_hat = u + (m(w^T u) - w^T u) w / ||w||^2`` with ``m(s) = -1 + softplus(s)`` (so ``w^T u_hat > -1``).

The radial step is not written in the seeds (only named in the issue); the standard form of Rezende &
Mohamed (2015) is used: ``z' = z + beta h(alpha, r) (z - z0)``, ``h = 1/(alpha + r)``, ``r = ||z - z0||``,
``alpha = softplus(.) > 0``, ``beta = -alpha + softplus(.) >= -alpha`` (invertibility), with
``log|det J| = (D-1) log(1 + beta h) + log(1 + beta h - beta r / (alpha + r)^2)`` and a closed-form inverse.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.nn.functional import softplus

from inference.flows.core import FlowTransform, LazyTransform, solve_tanh_shift

__all__ = ["PlanarTransform", "Planar", "RadialTransform", "Radial"]


class PlanarTransform(FlowTransform):
    def __init__(self, u: Tensor, w: Tensor, b: Tensor):
        super().__init__()
        wu = (w * u).sum(-1, keepdim=True)
        self.u = u + (softplus(wu) - 1.0 - wu) * w / (w * w).sum(-1, keepdim=True).clamp_min(1e-12)
        self.w, self.b = w, b

    def _forward_and_ladj(self, x):
        a = (x * self.w).sum(-1) + self.b
        t = torch.tanh(a)
        y = x + self.u * t.unsqueeze(-1)
        # det J = 1 + (1 - tanh^2) u^T w  (5.9); > 0 because u^T w > -1
        ladj = torch.log1p((1 - t * t) * (self.u * self.w).sum(-1))
        return y, ladj

    def _inverse(self, y):
        # w^T y + b = a + (w^T u) tanh(a), a = w^T x + b: a 1-D monotone equation
        a = solve_tanh_shift((y * self.w).sum(-1) + self.b, (self.u * self.w).sum(-1).expand(y.shape[:-1]))
        return y - self.u * torch.tanh(a).unsqueeze(-1)


class Planar(LazyTransform):
    """Planar step on R^features; amortised when ``context > 0``."""

    def __init__(self, features: int, context: int = 0):
        self.features = features
        super().__init__(context)

    def init_params(self):
        d = self.features
        return {"u": torch.randn(d) * 0.1 / d ** 0.5, "w": torch.randn(d) / d ** 0.5, "b": torch.zeros(())}

    def build(self, p):
        return PlanarTransform(p["u"], p["w"], p["b"])


class RadialTransform(FlowTransform):
    def __init__(self, z0: Tensor, alpha_raw: Tensor, beta_raw: Tensor):
        super().__init__()
        self.z0 = z0
        self.alpha = softplus(alpha_raw).unsqueeze(-1)
        self.beta = (softplus(beta_raw) - softplus(alpha_raw)).unsqueeze(-1)

    def _forward_and_ladj(self, x):
        diff = x - self.z0
        r = diff.norm(dim=-1, keepdim=True)
        h = 1.0 / (self.alpha + r)
        y = x + self.beta * h * diff
        d = x.shape[-1]
        bh = self.beta * h
        ladj = (d - 1) * torch.log1p(bh) + torch.log1p(bh - self.beta * r * h * h)
        return y, ladj.squeeze(-1)

    def _inverse(self, y):
        diff = y - self.z0
        r_out = diff.norm(dim=-1, keepdim=True)
        # r_out = r (1 + beta / (alpha + r))  =>  r^2 + (alpha + beta - r_out) r - alpha r_out = 0
        p = self.alpha + self.beta - r_out
        r = 0.5 * (-p + torch.sqrt(p * p + 4 * self.alpha * r_out))
        return self.z0 + diff * (r / r_out.clamp_min(1e-30))


class Radial(LazyTransform):
    """Radial step on R^features; amortised when ``context > 0``."""

    def __init__(self, features: int, context: int = 0):
        self.features = features
        super().__init__(context)

    def init_params(self):
        return {"z0": torch.randn(self.features) * 0.1, "alpha_raw": torch.zeros(()), "beta_raw": torch.zeros(())}

    def build(self, p):
        return RadialTransform(p["z0"], p["alpha_raw"], p["beta_raw"])
