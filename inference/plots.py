"""One-line PNG plots of samples and traces for the docs (matplotlib, imported lazily, Agg backend).

    plot_samples(x, target=targets.mog2(), path="docs/img/mcmc_mog2.png")
    plot_trace(chains, path="docs/img/mcmc_trace.png")
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Optional[str]):
    if path is not None:
        fig.savefig(path, dpi=110, bbox_inches="tight")
    return fig


def plot_samples(samples: Tensor | Sequence[Tensor], target=None, path: Optional[str] = None,
                 titles: Optional[Sequence[str]] = None, extent: Optional[float] = None, grid: int = 200):
    """Scatter 2-D samples ([N, 2], [chains, draws, 2], or a list of such for side-by-side panels) over the
    target's density contours (when ``target`` is given)."""
    plt = _plt()
    panels = list(samples) if isinstance(samples, (list, tuple)) else [samples]
    panels = [torch.as_tensor(p).detach().cpu().double().reshape(-1, torch.as_tensor(p).shape[-1]) for p in panels]
    if any(p.shape[-1] != 2 for p in panels):
        raise ValueError("plot_samples: samples must be 2-D points")
    if extent is None:
        extent = float(max(p.abs().max() for p in panels)) * 1.1 + 0.5
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4), squeeze=False)
    if target is not None:
        g = torch.linspace(-extent, extent, grid, dtype=torch.float64)
        xx, yy = torch.meshgrid(g, g, indexing="xy")
        dens = torch.exp(target.log_prob(torch.stack([xx, yy], -1)))
    for i, (ax, p) in enumerate(zip(axes[0], panels)):
        if target is not None:
            ax.contourf(xx.numpy(), yy.numpy(), dens.numpy(), levels=20, cmap="Blues")
        ax.scatter(p[:, 0].numpy(), p[:, 1].numpy(), s=4, c="tab:red", alpha=0.6)
        ax.set_xlim(-extent, extent)
        ax.set_ylim(-extent, extent)
        ax.set_aspect("equal")
        if titles is not None:
            ax.set_title(titles[i])
    fig.tight_layout()
    return _save(fig, path)


def plot_trace(samples: Tensor, path: Optional[str] = None, names: Optional[Sequence[str]] = None,
               max_chains: int = 10):
    """Trace plot per coordinate of [chains, draws, d] samples (one line per chain)."""
    plt = _plt()
    x = torch.as_tensor(samples).detach().cpu().double()
    if x.ndim != 3:
        raise ValueError("plot_trace: samples must be [chains, draws, d]")
    d = x.shape[-1]
    fig, axes = plt.subplots(d, 1, figsize=(8, 2 * d), squeeze=False, sharex=True)
    for j in range(d):
        for c in range(min(x.shape[0], max_chains)):
            axes[j, 0].plot(x[c, :, j].numpy(), lw=0.6)
        axes[j, 0].set_ylabel(names[j] if names else f"x{j}")
    axes[-1, 0].set_xlabel("step")
    fig.tight_layout()
    return _save(fig, path)


def plot_curves(curves: dict, path: Optional[str] = None, xlabel: str = "", ylabel: str = "",
                logx: bool = False, logy: bool = False, title: str = ""):
    """Lines from {label: (xs, ys)}."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for label, (xs, ys) in curves.items():
        ax.plot(list(xs), list(ys), marker="o", ms=3, label=label)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return _save(fig, path)
