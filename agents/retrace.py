"""Retrace(lambda) targets over stored sequences (Munos et al. 2016), as used by SVG(0) in seed 000 Alg 9.

The thesis (seed 000_02c29175254ceb0c.txt, Ch 6.1.2) treats Retrace as a black box; this is the standard form
(../shared/research/seed000.md §6.2):

    Q^R_t = Q(s_t,a_t) + sum_{j>=t} (prod_{i=t}^{j-1} gamma d_i c_{i+1}) delta_j,
    delta_j = r_j + gamma d_j E_{a~pi} Q(s_{j+1}, a) - Q(s_j, a_j),        c_i = lambda min(1, pi(a_i|s_i) / mu(a_i|s_i)),

computed by the equivalent backward recursion

    Q^R_t = r_t + gamma d_t [ V_{t+1} + c_{t+1} (Q^R_{t+1} - Q(s_{t+1}, a_{t+1})) ]      (the c-term only if step t+1 exists)

d_t is 0 when step t ended the episode in a true terminal state (no bootstrap) and 1 otherwise; a time-limit
truncation keeps d_t = 1 and bootstraps from V of the final observation. Steps past the end of an episode or of
the stored window are masked out and contribute nothing.
"""
from __future__ import annotations

import torch


def truncated_importance_weights(log_ratio: torch.Tensor, lam: float) -> torch.Tensor:
    """c_t = lambda * min(1, pi(a_t|s_t) / mu(a_t|s_t)), from log pi(a_t|s_t) - log mu(a_t|s_t)."""
    return lam * torch.exp(torch.clamp(log_ratio, max=0.0))


def retrace_targets(rewards: torch.Tensor, discounts: torch.Tensor, mask: torch.Tensor, q_taken: torch.Tensor,
                    v_next: torch.Tensor, c: torch.Tensor, gamma: float) -> torch.Tensor:
    """Retrace targets for every step of a batch of sequences; all arguments are [B, K].

    rewards: r_t; discounts: d_t (0 at a true terminal); mask: 1 for stored steps, a prefix of ones per row;
    q_taken: Q(s_t, a_t); v_next: E_pi Q(s_{t+1}, .); c: truncated importance weights of a_t.
    Returns Q^R [B, K] (entries where mask is 0 are 0).
    """
    K = rewards.shape[1]
    targets = torch.zeros_like(rewards)
    carry = torch.zeros_like(rewards[:, 0])  # c_{t+1} (Q^R_{t+1} - Q_{t+1}), zero past the last step
    for t in range(K - 1, -1, -1):
        target = rewards[:, t] + gamma * discounts[:, t] * (v_next[:, t] + carry)
        targets[:, t] = target * mask[:, t]
        carry = mask[:, t] * c[:, t] * (target - q_taken[:, t])
    return targets
