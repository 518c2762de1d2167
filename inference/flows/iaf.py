"""Inverse autoregressive flow (IAF) with MADE masks.

Seeds: 000_02c29175254ceb0c.txt (5.31), the gated IAF baseline of the Sylvester chapter:
``h_z = ELU(ML(z)); h = h_z + h_ctx(x); h = ELU(ML(h)); mu = ML(h); s = ML(h);
z' = sigmoid(s) * z + (1 - sigmoid(s)) * mu`` with ML a MADE masked linear layer, and
001_dc5bafdce3ec8872.txt App. B.4.1: ``log|det J| = sum_i log sigmoid(s_i)``.
MADE masks follow Germain et al. (2015) (not in the seeds): input degrees 1..D in the step's order,
hidden degrees cycle through 1..D-1, a hidden unit sees inputs of degree <= its own, an output of degree
d sees hidden units of degree < d.  The bias of s starts at +1.5 (sigmoid ~ 0.82, the "forget-gate"
initialisation of Kingma et al. 2016) so a fresh step is close to the identity.
Inversion (log_prob of arbitrary points) takes D sequential passes.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from inference.flows.core import FlowTransform

__all__ = ["MaskedLinear", "MADE", "IAFTransform", "IAF"]


class MaskedLinear(nn.Linear):
    def __init__(self, in_features: int, out_features: int, mask: Tensor):
        super().__init__(in_features, out_features)
        self.register_buffer("mask", mask.to(self.weight.dtype))

    def forward(self, x):
        return F.linear(x, self.weight * self.mask, self.bias)


class MADE(nn.Module):
    """Two masked hidden layers producing (mu, s), each autoregressive in ``order`` (a permutation)."""

    def __init__(self, features: int, hidden: int, context: int = 0, order: Tensor | None = None):
        super().__init__()
        if features < 2:
            raise ValueError("IAF needs features >= 2 (a 1-D autoregressive flow is an affine map).")
        order = torch.arange(features) if order is None else order
        deg_in = torch.empty(features, dtype=torch.long)
        deg_in[order] = torch.arange(1, features + 1)
        deg_h = torch.arange(hidden) % (features - 1) + 1
        self.register_buffer("deg_in", deg_in)
        self.l1 = MaskedLinear(features, hidden, (deg_h[:, None] >= deg_in[None, :]))
        self.l2 = MaskedLinear(hidden, hidden, (deg_h[:, None] >= deg_h[None, :]))
        out_mask = (deg_in[:, None] > deg_h[None, :]).repeat(2, 1)
        self.l3 = MaskedLinear(hidden, 2 * features, out_mask)
        self.ctx = nn.Linear(context, hidden) if context > 0 else None
        with torch.no_grad():
            self.l3.weight.mul_(0.01)
            self.l3.bias.zero_()
            self.l3.bias[features:] = 1.5

    def forward(self, z: Tensor, h_ctx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        h = F.elu(self.l1(z))
        if h_ctx is not None:
            h = h + h_ctx
        h = F.elu(self.l2(h))
        mu, s = self.l3(h).chunk(2, dim=-1)
        return mu, s


class IAFTransform(FlowTransform):
    def __init__(self, made: MADE, h_ctx: Tensor | None):
        super().__init__()
        self.made, self.h_ctx = made, h_ctx

    def _forward_and_ladj(self, x):
        mu, s = self.made(x, self.h_ctx)
        gate = torch.sigmoid(s)
        y = gate * x + (1 - gate) * mu
        return y, F.logsigmoid(s).sum(-1)

    def _inverse(self, y):
        x = torch.zeros_like(y)
        if self.h_ctx is not None:
            x = x + torch.zeros_like(self.h_ctx[..., :1])   # broadcast samples over the context batch
        for k in range(1, y.shape[-1] + 1):                   # pass k fixes the coordinate of degree k
            mu, s = self.made(x, self.h_ctx)
            x_new = y + (y - mu) * torch.exp(-s)              # = (y - (1 - sigmoid(s)) mu) / sigmoid(s)
            # keep not-yet-exact coordinates at 0: their garbage could overflow, and inf * (masked 0) = NaN
            x = torch.where(self.made.deg_in <= k, x_new, torch.zeros_like(x_new))
        return x


class IAF(nn.Module):
    """An IAF step; ``reverse=True`` uses the reversed variable order (alternate it across steps)."""

    def __init__(self, features: int, hidden: int = 64, context: int = 0, reverse: bool = False):
        super().__init__()
        order = torch.arange(features).flip(0) if reverse else torch.arange(features)
        self.made = MADE(features, hidden, context, order)

    def forward(self, c: Tensor | None = None) -> IAFTransform:
        if (self.made.ctx is None) != (c is None):
            raise ValueError("pass a context exactly when the IAF step was built with context > 0.")
        return IAFTransform(self.made, None if c is None else self.made.ctx(c))
