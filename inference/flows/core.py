"""Shared flow machinery: transforms with log-dets, lazily parameterised (optionally amortised) layers,
base distributions and the ``Flow`` module that returns a ``torch.distributions.Distribution``.

Seeds: 000_02c29175254ceb0c.txt Ch. 5, (5.4)-(5.5): ``log q_K(z_K) = log q_0(z_0) - sum_k log|det J_k|``;
amortisation as in Sec. 5.5 (the encoder's context produces the base's mean/scale and, through one
linear layer per flow step, every flow parameter).  004_22b7c09145613257.txt Sec. 2.5 (same formula).

Shape conventions: a context of shape [B, C] gives distributions with batch shape [B]; samples have
shape [*sample_shape, B, D]; flow parameters have shape [B, *param_shape] and broadcast over samples.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import torch
from torch import Tensor, nn
from torch.distributions import Distribution, Independent, Normal, Transform, TransformedDistribution, constraints

__all__ = ["FlowTransform", "LazyTransform", "StandardNormal", "DiagNormal", "Flow", "solve_tanh_shift"]


class FlowTransform(Transform):
    """A bijection on R^D (event dim 1) whose forward pass also yields ``log|det J|`` (shape [...]).

    Subclasses implement ``_forward_and_ladj(x)`` and ``_inverse(y)``.  The log-det computed in the
    forward pass is kept for the matching (x, y) pair so ``TransformedDistribution.log_prob`` of a
    fresh sample does not recompute it.
    """

    domain = constraints.independent(constraints.real, 1)
    codomain = constraints.independent(constraints.real, 1)
    bijective = True

    def __init__(self):
        super().__init__(cache_size=1)
        self._last = None

    def _forward_and_ladj(self, x: Tensor) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def _call(self, x: Tensor) -> Tensor:
        y, ladj = self._forward_and_ladj(x)
        self._last = (x, y, ladj)
        return y

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        if self._last is not None and self._last[0] is x and self._last[1] is y:
            return self._last[2]
        return self._forward_and_ladj(x)[1]


def solve_tanh_shift(c: Tensor, a: Tensor, iters: int = 60) -> Tensor:
    """Solve ``v + a * tanh(v) = c`` elementwise for a > -1 (strictly increasing in v) by bisection.

    The root lies in [c - |a|, c + |a|] because |tanh| <= 1; 60 halvings reach float64 resolution.
    Used to invert planar (5.8) and Sylvester (5.13) steps (Theorem 2's back-substitution).
    """
    lo, hi = c - a.abs(), c + a.abs()
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        above = mid + a * torch.tanh(mid) > c
        hi = torch.where(above, mid, hi)
        lo = torch.where(above, lo, mid)
    return 0.5 * (lo + hi)


class LazyTransform(nn.Module):
    """A flow step whose parameters are free (``context=0``) or produced from a context (amortised).

    Subclasses declare ``param_shapes()`` (name -> shape), ``init_params()`` (name -> initial tensor) and
    ``build(params) -> FlowTransform``.  With a context, one linear layer maps the context to all
    parameters; its bias starts at the unconditional initial values and its weights near zero.
    """

    def __init__(self, context: int = 0):
        super().__init__()
        if context < 0:
            raise ValueError(f"context must be >= 0, got {context}.")
        self.context = context
        init = self.init_params()
        self._shapes = {k: tuple(v.shape) for k, v in init.items()}
        if context == 0:
            self.params = nn.ParameterDict({k: nn.Parameter(v) for k, v in init.items()})
        else:
            sizes = [math.prod(s) for s in self._shapes.values()]
            self.hyper = nn.Linear(context, sum(sizes))
            with torch.no_grad():
                self.hyper.weight.mul_(0.01)
                self.hyper.bias.copy_(torch.cat([v.reshape(-1) for v in init.values()]))

    def init_params(self) -> Mapping[str, Tensor]:
        raise NotImplementedError

    def build(self, params: Mapping[str, Tensor]) -> FlowTransform:
        raise NotImplementedError

    def forward(self, c: Tensor | None = None) -> FlowTransform:
        if self.context == 0:
            if c is not None:
                raise ValueError("this flow step was built with context=0; build it with context=C to condition on c.")
            return self.build(dict(self.params))
        if c is None or c.shape[-1] != self.context:
            raise ValueError(f"this flow step needs a context of shape [..., {self.context}], "
                             f"got {None if c is None else tuple(c.shape)}.")
        flat = self.hyper(c)
        params, start = {}, 0
        for name, shape in self._shapes.items():
            n = math.prod(shape)
            params[name] = flat[..., start:start + n].reshape(c.shape[:-1] + shape)
            start += n
        return self.build(params)


class StandardNormal(nn.Module):
    """N(0, I) on R^D as a module (follows the module's device/dtype through a buffer)."""

    def __init__(self, features: int):
        super().__init__()
        self.register_buffer("_zero", torch.zeros(features))

    def forward(self, c: Tensor | None = None) -> Distribution:
        batch = () if c is None else c.shape[:-1]
        loc = self._zero.expand(batch + self._zero.shape)
        return Independent(Normal(loc, torch.ones_like(loc), validate_args=False), 1, validate_args=False)


class DiagNormal(nn.Module):
    """Diagonal Gaussian N(mu, diag(sigma^2)); learnable, or amortised (linear heads on the context)."""

    def __init__(self, features: int, context: int = 0):
        super().__init__()
        self.context = context
        if context == 0:
            self.loc = nn.Parameter(torch.zeros(features))
            self.raw_scale = nn.Parameter(torch.zeros(features))
        else:
            self.head = nn.Linear(context, 2 * features)

    def forward(self, c: Tensor | None = None) -> Distribution:
        if self.context == 0:
            if c is not None:
                raise ValueError("DiagNormal was built with context=0 but a context was given.")
            loc, raw_scale = self.loc, self.raw_scale
        else:
            if c is None or c.shape[-1] != self.context:
                raise ValueError(f"DiagNormal needs a context of shape [..., {self.context}].")
            loc, raw_scale = self.head(c).chunk(2, dim=-1)
        # softplus(0.5413) = 1: the scale starts at one; the floor keeps log q finite
        scale = nn.functional.softplus(raw_scale + 0.5413) + 1e-6
        return Independent(Normal(loc, scale, validate_args=False), 1, validate_args=False)


class Flow(nn.Module):
    """``Flow(transforms, base)(c)`` -> ``TransformedDistribution`` with ``rsample`` and ``log_prob``.

    ``log_prob`` of a sample just drawn uses the cached inverse (no inversion); ``log_prob`` of any other
    point inverts each step (closed form, bisection or autoregressive passes, depending on the step).
    """

    def __init__(self, transforms: Sequence[nn.Module], base: nn.Module):
        super().__init__()
        self.transforms = nn.ModuleList(transforms)
        self.base = base

    def forward(self, c: Tensor | None = None) -> TransformedDistribution:
        ts = [t(c) for t in self.transforms]
        return TransformedDistribution(self.base(c), ts, validate_args=False)
