"""Normalising flows in the zuko style: a flow is an ``nn.Module``; calling it (optionally with a
context) returns a ``torch.distributions.Distribution`` with ``rsample`` and ``log_prob``.

Constructors: ``planar_flow``, ``radial_flow``, ``iaf_flow``, ``sylvester_flow`` (kind ``"orthogonal"``,
``"householder"`` or ``"triangular"``).  With ``context=C`` every parameter (base mean/scale and all
flow parameters) is amortised from a [B, C] context, as in a VAE encoder.
"""
from __future__ import annotations

from inference.flows.coupling import Coupling, CouplingTransform
from inference.flows.core import DiagNormal, Flow, FlowTransform, LazyTransform, StandardNormal, solve_tanh_shift
from inference.flows.iaf import IAF, MADE, IAFTransform, MaskedLinear
from inference.flows.planar import Planar, PlanarTransform, Radial, RadialTransform
from inference.flows.sylvester import (HouseholderSylvester, OrthogonalSylvester, SylvesterTransform,
                                       TriangularSylvester, bjorck_orthonormalise, householder_product)

__all__ = ["Flow", "FlowTransform", "LazyTransform", "StandardNormal", "DiagNormal", "solve_tanh_shift",
           "Planar", "PlanarTransform", "Radial", "RadialTransform", "IAF", "MADE", "IAFTransform",
           "MaskedLinear", "Coupling", "CouplingTransform", "OrthogonalSylvester", "HouseholderSylvester", "TriangularSylvester",
           "SylvesterTransform", "bjorck_orthonormalise", "householder_product",
           "planar_flow", "radial_flow", "iaf_flow", "sylvester_flow"]


def _check(features: int, steps: int):
    if features < 1 or steps < 1:
        raise ValueError(f"features and steps must be >= 1, got features={features}, steps={steps}.")


def planar_flow(features: int, steps: int = 4, context: int = 0) -> Flow:
    _check(features, steps)
    return Flow([Planar(features, context) for _ in range(steps)], DiagNormal(features, context))


def radial_flow(features: int, steps: int = 4, context: int = 0) -> Flow:
    _check(features, steps)
    return Flow([Radial(features, context) for _ in range(steps)], DiagNormal(features, context))


def iaf_flow(features: int, steps: int = 4, context: int = 0, hidden: int = 64) -> Flow:
    _check(features, steps)
    return Flow([IAF(features, hidden, context, reverse=k % 2 == 1) for k in range(steps)],
                DiagNormal(features, context))


def sylvester_flow(features: int, steps: int = 4, kind: str = "orthogonal", context: int = 0,
                   bottleneck: int | None = None, reflections: int = 4) -> Flow:
    """Sylvester flow; ``bottleneck`` M (orthogonal only, default D//2 or 1), ``reflections`` H (Householder)."""
    _check(features, steps)
    if kind == "orthogonal":
        m = bottleneck or max(1, features // 2)
        steps_ = [OrthogonalSylvester(features, m, context) for _ in range(steps)]
    elif kind == "householder":
        steps_ = [HouseholderSylvester(features, reflections, context) for _ in range(steps)]
    elif kind == "triangular":
        steps_ = [TriangularSylvester(features, k % 2 == 1, context) for k in range(steps)]
    else:
        raise ValueError(f"unknown Sylvester kind {kind!r}; use 'orthogonal', 'householder' or 'triangular'.")
    return Flow(steps_, DiagNormal(features, context))
