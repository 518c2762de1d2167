"""Stein methods: SVGD, amortised SVGD, KSD/MMD, and score estimators from samples.

``svgd_direction(particles, score, kernel)`` and ``amortised_svgd_step(sampler, optimizer, score_fn, noise, ...)``
are the pieces a soft-Q-learning agent reuses.
"""
from . import amortised, discrepancy, estimators, kernels, svgd
from .amortised import AttentionSampler, MLPSampler, amortised_svgd_loss, amortised_svgd_step, train_amortised_svgd
from .discrepancy import ksd, mmd2
from .estimators import kde_score, score_matching_score, stein_score
from .kernels import RBF, median_sq_dist
from .svgd import score_fn, svgd_direction

__all__ = [
    "amortised", "discrepancy", "estimators", "kernels", "svgd", "AttentionSampler", "MLPSampler",
    "amortised_svgd_loss", "amortised_svgd_step", "train_amortised_svgd", "ksd", "mmd2", "kde_score",
    "score_matching_score", "stein_score", "RBF", "median_sq_dist", "score_fn", "svgd_direction",
]
