"""Sylvester normalising flows: orthogonal (O-SNF), Householder (H-SNF) and triangular (T-SNF).

Seed: 000_02c29175254ceb0c.txt Ch. 5.
* (5.13) ``z' = z + Q R h(R~ Q^T z + b)``, R and R~ upper triangular M x M, Q in R^{D x M} with
  orthonormal columns; (5.14) ``det J = prod_m (1 + h'(v_m) r~_mm r_mm)`` with ``v = R~ Q^T z + b``.
* Theorem 2: invertible when h is smooth with bounded positive derivative, ``r_mm r~_mm > -1/||h'||_inf``
  and R~ is invertible.  Here h = tanh (||h'|| = 1) -- the thesis does not name h -- and the diagonals are
  ``tanh`` of free parameters, so ``r_mm r~_mm`` lies in (-1, 1) (the choice of the authors' public code;
  the thesis does not say how the condition is enforced).  R~ is invertible whenever no diagonal is
  exactly zero (probability one).  The inverse is Theorem 2's back-substitution (5.18)-(5.21): with
  ``A = R~ R`` and ``t = R~ Q^T z' + b``, solve ``v_m + A_mm h(v_m) = t_m - sum_{j>m} A_mj h(v_j)`` from
  m = M down to 1, then ``z = z' - Q R h(v)`` (exact when Q^T Q = I).
* O-SNF (5.25): Bjorck-Bowie iteration ``Q <- Q (I + (I - Q^T Q)/2)`` until ``||Q^T Q - I||_F <= eps``
  (<= 30 steps), back-propagated through.  The thesis leaves the scaling of Q^(0) open; we divide by
  the Frobenius norm, which puts every singular value in (0, 1] where the iteration converges.
* H-SNF (5.26): Q is a product of H Householder reflections.  The thesis prints
  ``H(z) = z - v v^T z / ||v||^2`` (a singular projection); the reflection ``z - 2 v v^T z / ||v||^2`` is
  used.  With amortised (per-datapoint) vectors the reflections are applied to vectors (O(HD)); a shared
  Q is formed once as a D x D matrix (cheaper in practice: two GEMMs instead of 2H vector passes).
* T-SNF: Q alternates between the identity and the order-reversing permutation across steps (M = D).
"""
from __future__ import annotations

import torch
from torch import Tensor

from inference.flows.core import FlowTransform, LazyTransform, solve_tanh_shift

__all__ = ["bjorck_orthonormalise", "householder_product", "SylvesterTransform", "OrthogonalSylvester",
           "HouseholderSylvester", "TriangularSylvester"]


def bjorck_orthonormalise(q: Tensor, max_iters: int = 30, tol: float = 1e-6) -> tuple[Tensor, int, float]:
    """Bjorck-Bowie orthonormalisation (5.25) of the columns of q ([..., D, M], M <= D).

    Returns ``(Q, iterations, residual)`` with ``residual = max ||Q^T Q - I||_F`` over the batch, checked
    before each update so the loop stops as soon as the tolerance holds.
    Differentiable (gradients flow through every iteration).
    """
    if q.dim() < 2 or q.shape[-1] > q.shape[-2]:
        raise ValueError(f"q must have shape [..., D, M] with M <= D, got {tuple(q.shape)}.")
    eye = torch.eye(q.shape[-1], dtype=q.dtype, device=q.device)
    q = q / q.flatten(-2).norm(dim=-1).clamp_min(1e-12)[..., None, None]
    it = 0
    while True:
        gram_err = eye - q.transpose(-1, -2) @ q
        residual = float(gram_err.detach().flatten(-2).norm(dim=-1).max())
        if residual <= tol or it == max_iters:
            break
        q = q @ (eye + 0.5 * gram_err)
        it += 1
    return q, it, residual


def _reflect(z: Tensor, v: Tensor) -> Tensor:
    # Householder reflection with the factor 2 (the thesis' (5.26) drops it)
    return z - 2.0 * v * ((z * v).sum(-1, keepdim=True) / (v * v).sum(-1, keepdim=True))


def householder_product(vs: Tensor) -> Tensor:
    """Q = H_1 H_2 ... H_H as a dense matrix ([..., D, D]) from vectors vs [..., H, D]."""
    d = vs.shape[-1]
    q = torch.eye(d, dtype=vs.dtype, device=vs.device).expand(vs.shape[:-2] + (d, d))
    for h in range(vs.shape[-2]):
        # right-multiply by H_h: rows of Q are reflected
        q = _reflect(q, vs[..., h, None, :])
    return q


class SylvesterTransform(FlowTransform):
    """One Sylvester step (5.13) given how to apply Q^T (``project``) and Q (``lift``)."""

    def __init__(self, project, lift, r: Tensor, r_tilde: Tensor, b: Tensor):
        super().__init__()
        # strictly upper parts free; diagonals bound * tanh(.) => r_mm r~_mm in (-1, 1) even where tanh
        # saturates to +-1 in floating point (Theorem 2's condition, strictly)
        bound = 1.0 - 1e-6
        self.r = r.triu(1) + torch.diag_embed(bound * torch.tanh(r.diagonal(dim1=-2, dim2=-1)))
        self.r_tilde = r_tilde.triu(1) + torch.diag_embed(bound * torch.tanh(r_tilde.diagonal(dim1=-2, dim2=-1)))
        self.diag_prod = self.r.diagonal(dim1=-2, dim2=-1) * self.r_tilde.diagonal(dim1=-2, dim2=-1)
        self.b, self.project, self.lift = b, project, lift

    @staticmethod
    def _matvec(a: Tensor, x: Tensor) -> Tensor:
        # shared matrix: one GEMM over all samples; per-sample (amortised) matrices: batched matvec
        return x @ a.transpose(-1, -2) if a.dim() == 2 else (a @ x.unsqueeze(-1)).squeeze(-1)

    def _forward_and_ladj(self, x):
        v = self._matvec(self.r_tilde, self.project(x)) + self.b
        hv = torch.tanh(v)
        y = x + self.lift(self._matvec(self.r, hv))
        ladj = torch.log1p((1 - hv * hv) * self.diag_prod).sum(-1)   # (5.14)
        return y, ladj

    def _inverse(self, y):
        a = self.r_tilde @ self.r                          # upper triangular, diag = r~_mm r_mm > -1
        t = self._matvec(self.r_tilde, self.project(y)) + self.b
        t, a = torch.broadcast_tensors(t.unsqueeze(-1), a)  # align batch shapes; t now [..., M, M]
        t = t[..., 0]
        m = t.shape[-1]
        hv = torch.zeros_like(t)
        for i in reversed(range(m)):                        # back-substitution (5.18)-(5.21)
            rhs = t[..., i] - (a[..., i, i + 1:] * hv[..., i + 1:]).sum(-1)
            hv[..., i] = torch.tanh(solve_tanh_shift(rhs, a[..., i, i]))
        return y - self.lift(self._matvec(self.r, hv))


class _SylvesterBase(LazyTransform):
    def __init__(self, features: int, bottleneck: int, context: int = 0):
        if not 1 <= bottleneck <= features:
            raise ValueError(f"need 1 <= M <= D, got M={bottleneck}, D={features}.")
        self.features, self.bottleneck = features, bottleneck
        super().__init__(context)

    def _triangular_init(self):
        m = self.bottleneck
        return {"r": torch.randn(m, m) * 0.01 + torch.eye(m) * 0.5,   # tanh(0.5): moderate diagonals
                "r_tilde": torch.randn(m, m) * 0.01 + torch.eye(m) * 0.5, "b": torch.zeros(m)}


class OrthogonalSylvester(_SylvesterBase):
    """O-SNF: Q with M orthonormal columns from Bjorck iteration; M = ``bottleneck`` <= D."""

    def __init__(self, features: int, bottleneck: int, context: int = 0, max_iters: int = 30, tol: float = 1e-6):
        self.max_iters, self.tol = max_iters, tol
        super().__init__(features, bottleneck, context)

    def init_params(self):
        return {"q": torch.randn(self.features, self.bottleneck), **self._triangular_init()}

    def build(self, p):
        q, _, _ = bjorck_orthonormalise(p["q"], self.max_iters, self.tol)
        if q.dim() == 2:
            return SylvesterTransform(lambda z: z @ q, lambda v: v @ q.transpose(-1, -2), p["r"], p["r_tilde"], p["b"])
        return SylvesterTransform(lambda z: (z.unsqueeze(-2) @ q).squeeze(-2),
                                  lambda v: (q @ v.unsqueeze(-1)).squeeze(-1), p["r"], p["r_tilde"], p["b"])


class HouseholderSylvester(_SylvesterBase):
    """H-SNF: Q = H_1 ... H_H (``reflections`` Householder vectors), M = D."""

    def __init__(self, features: int, reflections: int, context: int = 0):
        if reflections < 1:
            raise ValueError(f"reflections must be >= 1, got {reflections}.")
        self.reflections = reflections
        super().__init__(features, features, context)

    def init_params(self):
        return {"v": torch.randn(self.reflections, self.features), **self._triangular_init()}

    def build(self, p):
        vs = p["v"]
        if vs.dim() == 2:
            # shared Q: forming the D x D matrix once and using GEMMs beats 2H vector reflections
            q = householder_product(vs)
            return SylvesterTransform(lambda z: z @ q, lambda v: v @ q.transpose(-1, -2),
                                      p["r"], p["r_tilde"], p["b"])

        def project(z):            # Q^T z = H_H ... H_1 z, O(HD) per sample for amortised vectors
            for h in range(vs.shape[-2]):
                z = _reflect(z, vs[..., h, :])
            return z

        def lift(v):               # Q v = H_1 ... H_H v
            for h in reversed(range(vs.shape[-2])):
                v = _reflect(v, vs[..., h, :])
            return v

        return SylvesterTransform(project, lift, p["r"], p["r_tilde"], p["b"])


class TriangularSylvester(_SylvesterBase):
    """T-SNF: Q = identity (``reverse=False``) or the order-reversing permutation; alternate across steps."""

    def __init__(self, features: int, reverse: bool = False, context: int = 0):
        self.reverse = reverse
        super().__init__(features, features, context)

    def init_params(self):
        return self._triangular_init()

    def build(self, p):
        perm = (lambda z: z.flip(-1)) if self.reverse else (lambda z: z)
        return SylvesterTransform(perm, perm, p["r"], p["r_tilde"], p["b"])
