"""Behaviour priors pi_0 for KL-regularised RL: MLP, LSTM and latent AR(1) (seed 000, Ch 7).

Seed 000_02c29175254ceb0c.txt, Ch 7 (transcribed in ../shared/research/seed000.md §7). Every prior answers one
question, ``prior.kl(obs, policy_mean, policy_std, actions, mask)``: the per-step KL(pi(.|s_t) || pi_0(.|s_t)) (or,
for the latent prior, the per-step bound K_t of eq 7.12) over a batch of replayed sequences ``[B, T]``.

Action space. Policies and priors are tanh-squashed diagonal Gaussians over the same bounded actions a = tanh(u).
KL is invariant under that shared bijection, and the log|det| of tanh cancels inside K_t's ratio
pi(a_t|s_t) / pi_0(a_t|s_t, z_t), so everything here is computed on the pre-squash Gaussians over u = atanh(a).
Priors return pre-squash means and standard deviations; ``observations`` are the prior's own groups only
(information asymmetry, §7.4.2: the agent selects them before calling the prior).

- Normal prior: a fixed pi_0(u|s) = N(0, ``std``^2 I) with no parameters: eq 7.2 against a known default behaviour
  instead of a learned one. Reusing NPMP primitives with the high-level action as the AR(1) prior's innovation
  (agents/npmp.py ``latent_mode=innovation``), it is the primitives' own latent prior (eq 8.2) seen through the
  action scale, and keeps the high-level latents where the decoder was trained until the reward says otherwise.
- MLP prior: pi_0(u|s) = N(mu(s), sigma(s)), analytic KL (eq 7.2's per-step term).
- LSTM prior (§7.4.3, "a drop-in replacement"): the same Gaussian head on an LSTM over the sequence's prior
  observations. Replayed sequences start mid-episode; the LSTM starts from a zero state at the first replayed step
  (no burn-in -- the thesis does not say).
- Latent prior (eqs 7.4-7.6, 7.12, Alg 11): z_t = alpha z_{t-1} + sqrt(1 - alpha^2) eps (marginal N(0, I)), decoder
  pi_0(u|s, z) Gaussian, and an inference network f(z_t | z_{t-1}, s_{t:t+k}, a_{t:t+k}) that looks k steps ahead.
  K_t = log pi(a_t|s_t) + log f(z_t|...) - log pi_0(z_t|z_{t-1}) - log pi_0(a_t|s_t, z_t) with z ~ f, a single
  sample per step; E[sum_t K_t] >= KL(pi || pi_0) over the trajectory. The first replayed step's z has the AR(1)
  marginal N(0, I) as its prior and a zero z_{t-1} as the inference network's input. With ``analytic=True`` the
  action part log pi - log pi_0(.|z) is replaced by its expectation under pi, KL(pi(.|s_t) || pi_0(.|s_t, z_t)) --
  the form the agent differentiates for the policy (see agents/svg0.py). Choices where the thesis is silent: AR
  coefficient alpha = 0.95 (Ch 7 does not report it; Ch 8 uses 0.95), look-ahead k = 3 ("a small integer"), latent
  size 2 (§7.7.2), f sees the prior's observation groups and the replayed actions.
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn
from torch.distributions import Normal, kl_divergence

from inference.layers.mlp import bounded_log_std, mlp

KINDS = ("mlp", "lstm", "latent", "normal")


@dataclasses.dataclass(frozen=True)
class PriorConfig:
    kind: str
    obs_dim: int
    action_dim: int
    hidden: tuple[int, ...] = (300, 300)
    latent_dim: int = 2
    ar_coef: float = 0.95  # alpha of the AR(1) latent chain (eq 7.5)
    lookahead: int = 3  # k: the inference network sees s_{t:t+k}, a_{t:t+k}
    std: float = 1.0  # the normal prior's pre-squash standard deviation

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"prior kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.obs_dim < 1 or self.action_dim < 1:
            raise ValueError("a prior needs at least one observation and one action dimension")
        if not (len(self.hidden) >= 1 and min(self.hidden) >= 1):
            raise ValueError("prior hidden must list positive layer widths")
        if self.latent_dim < 1 or self.lookahead < 0:
            raise ValueError("latent_dim must be >= 1 and lookahead >= 0")
        if not 0.0 <= self.ar_coef < 1.0:
            raise ValueError(f"ar_coef must be in [0, 1), got {self.ar_coef}")
        if not 0.0 < self.std < math.inf:
            raise ValueError(f"std must be finite and > 0, got {self.std}")


def gaussian_head(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean, log_std = raw.chunk(2, dim=-1)
    return mean, bounded_log_std(log_std).exp()


def pre_squash(actions: torch.Tensor) -> torch.Tensor:
    """u = atanh(a), with actions clamped as in agents/distributions.py so saturated actions stay finite."""
    return torch.atanh(actions.clamp(-1.0 + 1e-6, 1.0 - 1e-6))


def gaussian_kl(mean_p, std_p, mean_q, std_q) -> torch.Tensor:
    """KL(N(mean_p, std_p) || N(mean_q, std_q)) for diagonal Gaussians, summed over the last dimension."""
    return kl_divergence(Normal(mean_p, std_p), Normal(mean_q, std_q)).sum(-1)


def gaussian_log_prob(x, mean, std) -> torch.Tensor:
    return Normal(mean, std).log_prob(x).sum(-1)


def ar1_prior(z_prev: torch.Tensor, ar_coef: float, first: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std of p(z_t | z_{t-1}) for the AR(1) chain z_t = alpha z_{t-1} + sqrt(1 - alpha^2) eps (seed 000
    eqs 7.5 and 8.2); at a sequence's first step, its stationary marginal N(0, I)."""
    if first:
        return torch.zeros_like(z_prev), torch.ones_like(z_prev)
    return ar_coef * z_prev, torch.full_like(z_prev, math.sqrt(1.0 - ar_coef ** 2))


def ar1_chain(steps: int, batch: int, latent_dim: int, ar_coef: float, generator=None) -> torch.Tensor:
    """[batch, steps, latent_dim] samples of the AR(1) chain started from its marginal."""
    z = torch.randn(batch, latent_dim, generator=generator)
    chain = [z]
    for _ in range(steps - 1):
        mean, std = ar1_prior(z, ar_coef, first=False)
        z = mean + std * torch.randn(batch, latent_dim, generator=generator)
        chain.append(z)
    return torch.stack(chain, dim=1)


class Prior(nn.Module):
    """Base class: ``forward``-free modules with ``kl`` and a saved ``config``."""

    def __init__(self, config: PriorConfig):
        super().__init__()
        config.validate()
        self.config = config

    def kl(self, obs, policy_mean, policy_std, actions, mask, analytic: bool = False):
        """Per-step KL (or bound) [B, T] and a dict of scalar diagnostics; see the module docstring."""
        raise NotImplementedError  # abstract: MLPPrior, LSTMPrior, LatentPrior


class GaussianPrior(Prior):
    """A prior with an explicit Gaussian pi_0(u|s) per step (``distribution``): the KL is analytic."""

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError  # abstract: MLPPrior, LSTMPrior

    def kl(self, obs, policy_mean, policy_std, actions=None, mask=None, analytic: bool = True):
        return gaussian_kl(policy_mean, policy_std, *self.distribution(obs)), {}


class NormalPrior(GaussianPrior):
    """pi_0(u|s) = N(0, std^2 I) whatever the state: nothing to learn."""

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = obs.new_zeros(*obs.shape[:-1], self.config.action_dim)
        return mean, torch.full_like(mean, self.config.std)


class MLPPrior(GaussianPrior):
    def __init__(self, config: PriorConfig):
        super().__init__(config)
        self.net = mlp(config.obs_dim, config.hidden, 2 * config.action_dim)

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return gaussian_head(self.net(obs))


class LSTMPrior(GaussianPrior):
    def __init__(self, config: PriorConfig):
        super().__init__(config)
        self.lstm = nn.LSTM(config.obs_dim, config.hidden[0], batch_first=True)
        self.head = mlp(config.hidden[0], config.hidden[1:], 2 * config.action_dim)

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Gaussians for a batch of sequences ``obs [B, T, obs_dim]`` unrolled from a zero state."""
        features, _ = self.lstm(obs)
        return gaussian_head(self.head(features))


class LatentPrior(Prior):
    def __init__(self, config: PriorConfig):
        super().__init__(config)
        c = config
        self.decoder = mlp(c.obs_dim + c.latent_dim, c.hidden, 2 * c.action_dim)  # pi_0(u | s, z)
        window = (c.lookahead + 1) * (c.obs_dim + c.action_dim + 1)  # states, actions, "is in the sequence" flags
        self.inference = mlp(c.latent_dim + window, c.hidden, 2 * c.latent_dim)  # f(z_t | z_{t-1}, s_t.., a_t..)
        self.innovation_std = math.sqrt(1.0 - c.ar_coef ** 2)  # sigma of eq 7.5

    def decode(self, obs: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """pi_0(u | s, z): the low-level controller when the latent space is reused as an action space."""
        return gaussian_head(self.decoder(torch.cat([obs, z], dim=-1)))

    def _windows(self, obs, actions, mask) -> torch.Tensor:
        """[B, T, (k+1)(obs+action+1)]: s_{t:t+k}, a_{t:t+k} and validity flags, zero past the sequence's end."""
        k = self.config.lookahead
        steps = torch.cat([obs, actions, mask.unsqueeze(-1)], dim=-1) * mask.unsqueeze(-1)
        padded = torch.cat([steps, steps.new_zeros(steps.shape[0], k, steps.shape[2])], dim=1)
        T = obs.shape[1]
        return torch.cat([padded[:, j:j + T] for j in range(k + 1)], dim=-1)

    def kl(self, obs, policy_mean, policy_std, actions, mask, analytic: bool = False):
        c = self.config
        u = pre_squash(actions)
        windows = self._windows(obs, actions, mask)
        z_prev = obs.new_zeros(obs.shape[0], c.latent_dim)
        bounds, action_terms, latent_terms = [], [], []
        for t in range(obs.shape[1]):
            f_mean, f_std = gaussian_head(self.inference(torch.cat([z_prev, windows[:, t]], dim=-1)))
            z = f_mean + f_std * torch.randn_like(f_mean)
            prior_mean, prior_std = ar1_prior(z_prev, c.ar_coef, first=t == 0)
            latent_term = gaussian_log_prob(z, f_mean, f_std) - gaussian_log_prob(z, prior_mean, prior_std)
            dec_mean, dec_std = self.decode(obs[:, t], z)
            if analytic:
                action_term = gaussian_kl(policy_mean[:, t], policy_std[:, t], dec_mean, dec_std)
            else:
                action_term = (gaussian_log_prob(u[:, t], policy_mean[:, t], policy_std[:, t])
                               - gaussian_log_prob(u[:, t], dec_mean, dec_std))
            bounds.append(action_term + latent_term)
            action_terms.append(action_term)
            latent_terms.append(latent_term)
            z_prev = z
        valid = mask.bool()
        terms = {"action_term": torch.stack(action_terms, 1)[valid].mean().item(),
                 "latent_term": torch.stack(latent_terms, 1)[valid].mean().item()}
        return torch.stack(bounds, dim=1), terms


def build(config: PriorConfig) -> Prior:
    config.validate()
    return {"mlp": MLPPrior, "lstm": LSTMPrior, "latent": LatentPrior, "normal": NormalPrior}[config.kind](config)
