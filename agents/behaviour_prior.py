"""KL regularisation against a learned behaviour prior: svg0's ``prior`` part (seed 000 Ch 7, Alg 10; Alg 11 for the
latent prior; ../shared/research/seed000.md §7).

With a prior pi_0 (priors/models.py: mlp | lstm | latent, or the fixed normal N(0, ``std``^2) that nothing trains),
SVG(0)'s objective becomes eq 7.2,
  E_pi [ sum_t gamma^t ( r_t - kl_coef * KL[pi(.|s_t) || pi_0(.|s_t)] ) ],
which svg0 (agents/svg0.py) applies through three hooks of ``BehaviourPrior``:
- ``reward_penalty``: r~_t = r_t - kl_coef * KL[pi^O(.|s_t) || pi_0^T(.|s_t)] inside Retrace (the *target* prior);
- ``policy_penalty``: Alg 10's listing leaves the current step's KL out of the policy loss, although objective 7.2
  implies it (Q built from augmented rewards has no gradient for a KL that does not depend on a_t);
  ``kl_in_policy_loss`` (default on) adds kl_coef * KL[pi^O || pi_0^T], differentiated w.r.t. the policy only; for
  the latent prior its action part is taken analytically given z ~ f^T;
- ``update``: the prior minimises L_pi0 = sum_t KL[pi^O(.|s_t) || pi_0^O(.|s_t)] w.r.t. its own parameters only (the
  policy is detached: distillation); the latent prior's inference network is trained by the same loss and rate.
Information asymmetry (§7.4.2): the prior sees only the observation groups in ``obs`` (default: proprio), and always
raw observations -- a saved prior is reused by runs with other normalisation statistics. Every P updates
pi_0^T <- pi_0^O with svg0's other targets (``target_pairs``). Transfer: ``init=PATH`` starts from a saved prior (a
run exports its prior to ``<run>/prior`` at every checkpoint), ``trainable=false`` keeps it fixed.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch

import priors
from agents.config import ConfigError
from agents.networks import frozen_copy, gradient_step
from agents.observations import ObsLayout
from agents.replay import masked_mean


@dataclasses.dataclass(frozen=True)
class PriorSection:
    kind: str = "none"  # none | mlp | lstm | latent | normal (fixed)
    obs: tuple[str, ...] = ("proprio",)  # observation groups the prior sees (information asymmetry)
    kl_coef: float = 0.01  # alpha of eq 7.2
    lr: float = 3e-4
    hidden: tuple[int, ...] = (300, 300)
    kl_in_policy_loss: bool = True
    init: str = ""  # a saved prior (or a run directory that exported one) to start from
    trainable: bool = True
    latent_dim: int = 2  # the latent prior's z (Alg 11)
    latent_ar_coef: float = 0.95
    latent_lookahead: int = 3
    std: float = 1.0  # the normal prior's pre-squash std

    def validate(self) -> None:
        checks = [
            (self.kind in ("none", *priors.KINDS), f"prior.kind must be none, {', '.join(priors.KINDS)}"),
            (len(self.obs) >= 1, "prior.obs must name at least one observation group"),
            (0.0 <= self.kl_coef < math.inf, "prior.kl_coef must be finite and >= 0"),
            (0 < self.lr < math.inf, "prior.lr must be finite and > 0"),
            (len(self.hidden) >= 1 and min(self.hidden) >= 1, "prior.hidden must list positive widths"),
            (self.kind != "none" or not self.init, "prior.init needs a prior kind (--set prior=...)"),
            (self.latent_dim >= 1 and self.latent_lookahead >= 0, "prior.latent_dim >= 1, prior.latent_lookahead >= 0"),
            (0.0 <= self.latent_ar_coef < 1.0, "prior.latent_ar_coef must be in [0, 1)"),
            (0.0 < self.std < math.inf, "prior.std must be finite and > 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)


class BehaviourPrior:
    """The prior pi_0^O, its target pi_0^T and its optimiser, for a policy over ``action_dim`` actions."""

    def __init__(self, section: PriorSection, layout: ObsLayout, action_dim: int, device: torch.device,
                 grad_clip: float | None = None):
        self.section, self.layout, self.grad_clip = section, layout, grad_clip
        try:
            self.groups = layout.check_groups(section.obs)
        except ValueError as e:
            raise ConfigError(f"prior.obs: {e}") from None
        self.obs_sizes = {g: layout.size([g]) for g in layout.groups if g in self.groups}
        if section.init:
            try:
                prior, meta = priors.load_prior(section.init, device)
            except priors.ModuleFileError as e:
                raise ConfigError(f"prior.init: {e}") from None
            if prior.config.kind != section.kind or prior.config.action_dim != action_dim:
                raise ConfigError(f"prior.init: {section.init} holds a {prior.config.kind} prior for "
                                  f"{prior.config.action_dim} actions; this run needs a {section.kind} prior for "
                                  f"{action_dim}")
            if meta.get("obs_groups") != self.obs_sizes:
                raise ConfigError(f"prior.init: the prior saw observation groups {meta.get('obs_groups')}, this "
                                  f"run's prior.obs give {self.obs_sizes}")
            self.prior = prior
        else:
            self.prior = priors.build(priors.PriorConfig(
                section.kind, layout.size(self.groups), action_dim, section.hidden, section.latent_dim,
                section.latent_ar_coef, section.latent_lookahead, section.std)).to(device)
        self.target_prior = frozen_copy(self.prior)
        self.optimiser = None
        if section.trainable and next(self.prior.parameters(), None) is not None:   # the normal prior has none
            self.optimiser = torch.optim.Adam(self.prior.parameters(), lr=section.lr)
        else:
            self.prior.requires_grad_(False)

    def kl(self, prior, batch: dict, dist, analytic: bool = False):
        """Per-step KL[pi(.|s_t) || prior(.|s_t)] [B, K] on the prior's observation groups of the raw observations."""
        action, mask = batch["action"], batch["mask"]
        prior_obs = self.layout.select(batch.get("raw_obs", batch["obs"])[:, :action.shape[1]], self.groups)
        return prior.kl(prior_obs, dist.mean, dist.std, action, mask, analytic=analytic)

    def reward_penalty(self, batch: dict, online_dist) -> tuple[torch.Tensor, dict]:
        """kl_coef * KL^T_t = kl_coef * KL[pi^O || pi_0^T] [B, K], subtracted from Retrace's rewards."""
        kl_target, _ = self.kl(self.target_prior, batch, online_dist)
        return self.section.kl_coef * kl_target, {"prior/kl_target": masked_mean(kl_target, batch["mask"])}

    def policy_penalty(self, batch: dict, dist) -> tuple[torch.Tensor | float, dict]:
        """kl_coef * KL[pi^O || pi_0^T] [B, K] for the policy loss (``kl_in_policy_loss``), else 0."""
        if not self.section.kl_in_policy_loss:
            return 0.0, {}
        kl, _ = self.kl(self.target_prior, batch, dist, analytic=True)
        return self.section.kl_coef * kl, {"prior/kl_policy_term": masked_mean(kl.detach(), batch["mask"])}

    def loss(self, batch: dict, policy) -> tuple[torch.Tensor, dict]:
        """L_pi0 = sum_t KL[pi^O || pi_0^O] w.r.t. the prior (and inference network) only: the policy is detached."""
        with torch.no_grad():
            dist = policy(batch["obs"][:, :batch["action"].shape[1]])
        kl, terms = self.kl(self.prior, batch, dist)
        loss = masked_mean(kl, batch["mask"])
        return loss, {"prior/kl_online": loss.detach(), **{f"prior/bound_{k}": v for k, v in terms.items()}}

    def update(self, batch: dict, policy) -> dict:
        if self.optimiser is None:
            return {}
        loss, metrics = self.loss(batch, policy)
        gradient_step(self.optimiser, loss, self.prior.parameters(), self.grad_clip)
        return {"loss/prior": loss.detach(), **metrics}

    def target_pairs(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        return [(self.target_prior, self.prior)]

    def export(self, run_dir, updates: int) -> None:
        """Save the prior where ``prior.init`` / ``latent_controller`` of another run can load it."""
        priors.save_prior(self.prior, Path(run_dir) / "prior", self.obs_sizes, updates=updates)

    def state_dict(self) -> dict:
        state = {"prior": self.prior.state_dict(), "target_prior": self.target_prior.state_dict()}
        if self.optimiser is not None:
            state["prior_opt"] = self.optimiser.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.prior.load_state_dict(state["prior"])
        self.target_prior.load_state_dict(state["target_prior"])
        if self.optimiser is not None:
            self.optimiser.load_state_dict(state["prior_opt"])
