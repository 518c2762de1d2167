"""H independent networks evaluated as one module: batched linear layers and a batched MLP.

An ensemble of H critics (clipped double Q, bootstrapped heads, UCB) costs one ``torch.baddbmm`` per layer instead
of H small matmuls in a Python loop (the role of ``torch.func.stack_module_state`` + ``vmap``, without functional
state). Each head is initialised exactly like an ``nn.Linear`` of the same shape, independently of the others.

``BatchedMLP(..., norm="layernorm")`` puts a per-head LayerNorm after every hidden linear layer (as in DroQ/RLPD);
``norm="residual"`` is the pre-LayerNorm residual body of SimBa (Lee et al. 2024): an input layer, then
``len(hidden) - 1`` blocks x + W2 relu(W1 LN(x)), and a final LayerNorm before the output layer. The block's inner
width equals its width (SimBa widens it 4x; on a CPU that quadruples the cost for little gain at these sizes).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["BatchedLinear", "BatchedLayerNorm", "BatchedMLP", "NORMS"]

NORMS = ("none", "layernorm", "residual")


class BatchedLinear(nn.Module):
    """x [H, N, in] -> [H, N, out] with head h's own weight [in, out] and bias."""

    def __init__(self, heads: int, in_dim: int, out_dim: int):
        super().__init__()
        bound = 1.0 / math.sqrt(in_dim)  # nn.Linear's default init: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias
        self.weight = nn.Parameter(torch.empty(heads, in_dim, out_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(heads, 1, out_dim).uniform_(-bound, bound))

    def forward(self, x: Tensor) -> Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class BatchedLayerNorm(nn.Module):
    """LayerNorm over the last dim with a per-head affine transform: x [H, N, W]."""

    def __init__(self, heads: int, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(heads, 1, width))
        self.bias = nn.Parameter(torch.zeros(heads, 1, width))

    def forward(self, x: Tensor) -> Tensor:
        return torch.addcmul(self.bias, F.layer_norm(x, x.shape[-1:]), self.weight)


class BatchedMLP(nn.Module):
    """H ReLU MLPs in lockstep. ``forward(x)`` takes [..., in] (shared by every head) or [H, ..., in] with
    ``shared_input=False``, and returns [H, ..., out]."""

    def __init__(self, heads: int, in_dim: int, hidden: Sequence[int], out_dim: int, norm: str = "none"):
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {', '.join(NORMS)}, got {norm!r}")
        if heads < 1 or not hidden or min(hidden) < 1:
            raise ValueError("a batched MLP needs heads >= 1 and positive hidden widths")
        if norm == "residual" and len(set(hidden)) != 1:
            raise ValueError(f"a residual body needs equal hidden widths, got {tuple(hidden)}")
        self.heads, self.norm = heads, norm
        widths = [in_dim, *hidden]
        self.hidden = nn.ModuleList(BatchedLinear(heads, a, b) for a, b in zip(widths[:-1], widths[1:]))
        if norm == "layernorm":
            self.norms = nn.ModuleList(BatchedLayerNorm(heads, w) for w in hidden)
        elif norm == "residual":  # one norm before each block's first layer and one before the output layer
            self.inner = nn.ModuleList(BatchedLinear(heads, hidden[0], hidden[0]) for _ in hidden[1:])
            self.norms = nn.ModuleList(BatchedLayerNorm(heads, hidden[0]) for _ in hidden)
        self.out = BatchedLinear(heads, hidden[-1], out_dim)

    def forward(self, x: Tensor, shared_input: bool = True) -> Tensor:
        lead = x.shape[:-1] if shared_input else x.shape[1:-1]
        h = x.reshape(1, -1, x.shape[-1]).expand(self.heads, -1, -1) if shared_input else \
            x.reshape(self.heads, -1, x.shape[-1])
        if self.norm == "residual":
            h = self.hidden[0](h)
            for first, second, norm in zip(self.inner, self.hidden[1:], self.norms):
                h = h + second(F.relu(first(norm(h))))
            h = self.norms[-1](h)
        else:
            for i, layer in enumerate(self.hidden):
                h = layer(h)
                if self.norm == "layernorm":
                    h = self.norms[i](h)
                h = F.relu(h)
        out = self.out(h)
        return out.reshape(self.heads, *lead, out.shape[-1])
