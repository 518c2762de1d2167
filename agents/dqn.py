"""DQN with Double-DQN targets and four ways to explore: epsilon-greedy, NoisyNet, bootstrapped heads, UCB.

Seed 004_22b7c09145613257.txt (extraction: ../shared/research/seed004.md, §1.8-1.11), built from the layers in
inference/layers:
- ``exploration=epsilon`` (Sec. 4 intro): a uniformly random action with probability epsilon, else greedy.
  Epsilon decays linearly from ``epsilon_start`` = 1.0 to ``epsilon_end`` = 0.05 over ``epsilon_decay_steps`` =
  5000 actor steps (the seed gives no value; these are the usual DQN-style defaults).
- ``exploration=noisy`` (Sec. 4.1, eq. 24, Fortunato et al. 2017): every linear layer of the Q-network is a
  factorised ``NoisyLinear`` (y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b; sigma0 = 0.5), no epsilon.
  Where the noise is redrawn -- the only places ``reset_noise`` is called:
    * learner: at the start of every ``update``, once for the online and once (independently) for the target
      network; that one online sample serves both Q(s, a) and the Double-DQN argmax at s';
    * actor, ``noise_resample=step`` (default; EXTERNAL, to verify: Fortunato et al.'s NoisyNet-DQN draws new
      noise for every action): before every ``act``;
      ``noise_resample=episode``: once per episode in ``begin_episode`` -- the acting noise is kept aside and put
      back before each ``act``, so learner updates inside the episode do not change the acting network;
    * ``act(..., deterministic=True)``: no noise at all -- the layers run on their means (eval mode), nothing
      is redrawn.
- ``exploration=bootstrap`` (Sec. 4.2, Osband et al. 2016): an ``Ensemble`` of ``ensemble_size`` Q-networks,
  each with a randomised prior function (Osband et al. 2018, EXTERNAL: Q_k = f_k + beta p_k, p_k a frozen,
  independently initialised network, ``prior_scale`` beta = 3). ``begin_episode`` draws one head uniformly and
  the agent acts greedily with it for the whole episode (Thompson-style). Head k learns only from transitions
  whose bootstrap mask m_k = 1, m_k ~ Bernoulli(``mask_prob`` = 0.5) (``masked_ensemble_loss``).
- ``exploration=ucb`` (Sec. 4.3, Chen et al. 2017): the same ensemble and training; acting picks
  argmax_a mean_k Q_k(s, a) + ``ucb_lambda`` * std_k Q_k(s, a) (``ucb_action``; lambda = 1.0, not stated in the
  seed).
- ``exploration=thompson`` (issue 16; seed 003 §6): a Bayesian linear layer Q(s, a) ~ w_a^T phi(s) whose posterior
  is the sum of per-replay-shard sites on SNEP's posterior server (agents/posterior_head.py); ``begin_episode``
  draws the weights from the posterior and the agent acts greedily on them for the whole episode. phi(s) is the
  observation and a constant (``posterior_features=observation``: on one-hot inputs such as DeepSea's, a tabular
  model) or the Q-network's last hidden layer (``hidden``, BDQN). Every ``posterior_period`` actor steps each of
  ``posterior_shards`` shards refits its site, ``posterior_sweeps`` times: with ``posterior_targets=sampled`` on
  r + gamma max_a' w~_a'^T phi(s') for a fresh posterior draw w~ each sweep (randomised least-squares value
  iteration, RLSVI, Osband et al. 2016: the uncertainty of what lies ahead reaches the values before it, one
  step per sweep), with ``network`` on the Double-DQN targets of the network. The network learns as for
  ``epsilon`` (it gives evaluation's greedy actions). Defaults measured on DeepSea: docs/exploration.md.
  ``posterior_server=ray`` puts the server and every shard (its transitions and its site) on Ray actors of their
  own, each shard refitting on its own data (``RayShardedPosterior``); ``local`` keeps all in this process.
- deterministic acting (evaluation): greedy on the mean over heads, noise off, no epsilon.

Learning (standard forms, the seed is silent): one-step Double DQN (van Hasselt et al. 2016) for every head k
with its own online/target pair, y_k = r + gamma d Q^T_k(s', argmax_a Q_k(s', a)), squared error, Adam; the
target networks are hard copies every ``target_period`` learner updates. One-step only: ``sequence_length``
must be 1 (the trainer's SequenceReplay then yields single transitions).

Bootstrap masks must be fixed per transition. SequenceReplay stores no mask, but its batches carry each step's
``write_id`` (a fixed identity per transition), so the mask is a hash of it (``fixed_bootstrap_mask``:
m_k = [splitmix64(salt, id, k) / 2^64 < mask_prob], the same every time that transition is sampled; the salt
is drawn once per agent and checkpointed). A batch without ``write_id`` (hand-made) gets masks drawn afresh
for every sampled transition (``bootstrap_mask``): each head then still sees a random part of every minibatch,
but over many updates it sees all data, so the heads differ only through their initialisation and priors; the
metric ``bootstrap/fixed_masks`` says which mode ran.

Defaults follow bsuite's bootstrapped-DQN baseline (bsuite/baselines/tf/boot_dqn): 2 x 50 ReLU MLPs, Adam 1e-3,
batch 128, gamma 0.99, replay 10^4, 128 steps before learning, one update per step, target copy every 4 updates,
prior scale 3, mask probability 0.5; ensemble size 10 instead of 20 to halve the CPU cost. bsuite's extra
epsilon 10/(10+t) on top of Thompson sampling is left out.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Literal

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from agents.schedule import Schedule
from agents.protocol import AgentBase
from agents.config import ConfigError
from agents.networks import frozen_copy, gradient_step, hard_update, mlp
from agents.observations import ObsLayout
from agents.posterior_head import RayShardedPosterior, ShardedLinearPosterior, sampled_targets
from inference.layers import (Ensemble, NoisyLinear, bootstrap_mask, fixed_bootstrap_mask, masked_ensemble_loss,
                              reset_noise, ucb_action)

__all__ = ["DQNConfig", "DQNAgent", "Exploration", "noisy_mlp"]

Exploration = Literal["epsilon", "noisy", "bootstrap", "ucb", "thompson"]


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    exploration: Exploration = "epsilon"
    hidden: tuple[int, ...] = (50, 50)
    lr: float = 1e-3
    discount: float = 0.99
    target_period: int = 4  # learner updates between hard target copies
    sequence_length: int = 1  # one-step transitions (see module docstring)
    grad_clip: float | None = None  # max gradient norm; None: no clipping
    # epsilon-greedy
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    epsilon_decay_steps: int = 5000
    # NoisyNet
    noise_resample: Literal["step", "episode"] = "step"
    noisy_sigma0: float = 0.5
    # bootstrap / ucb ensembles
    ensemble_size: int = 10
    prior_scale: float = 3.0  # beta of the randomised prior functions; 0 turns them off
    mask_prob: float = 0.5
    ucb_lambda: float = 1.0
    # thompson: the Bayesian last layer (agents/posterior_head.py); defaults from deep-sea-10, docs/exploration.md
    posterior_shards: int = 2  # replay shards, one site each on the posterior server
    posterior_period: int = 10  # actor steps between refits of the sites
    posterior_sweeps: int = 10  # refits per refresh (with sampled targets, each carries values one step further)
    posterior_features: Literal["hidden", "observation"] = "observation"  # inputs: the net's last hidden layer, or s
    posterior_targets: Literal["network", "sampled"] = "sampled"  # regress on the net's targets or the draw's own
    posterior_prior_var: float = 1.0
    posterior_server: Literal["local", "ray"] = "local"  # where the server and the shards live (posterior_head.py)
    posterior_address: str = ""  # posterior_server=ray: a Ray cluster to join ("auto", "ray://host:port"); "" local
    posterior_noise_var: float = 0.1

    def validate(self) -> None:
        checks = [
            (self.exploration in ("epsilon", "noisy", "bootstrap", "ucb", "thompson"),
             f"exploration must be epsilon, noisy, bootstrap, ucb or thompson, got {self.exploration!r}"),
            (len(self.hidden) >= 1 and min(self.hidden) >= 1, "hidden must list positive layer widths"),
            (0 < self.lr < math.inf, "lr must be finite and > 0"),
            (0.0 <= self.discount <= 1.0, "discount must be in [0, 1]"),
            (self.target_period >= 1, "target_period must be >= 1"),
            (self.sequence_length == 1, "dqn learns from one-step transitions: sequence_length must be 1"),
            (self.grad_clip is None or self.grad_clip > 0, "grad_clip must be > 0 (or none)"),
            (0.0 <= self.epsilon_end <= 1.0 and 0.0 <= self.epsilon_start <= 1.0, "epsilons must be in [0, 1]"),
            (self.epsilon_decay_steps >= 0, "epsilon_decay_steps must be >= 0"),
            (self.noise_resample in ("step", "episode"), "noise_resample must be step or episode"),
            (0.0 <= self.noisy_sigma0 < math.inf, "noisy_sigma0 must be finite and >= 0"),
            (self.ensemble_size >= 2 or self.exploration not in ("bootstrap", "ucb"),
             "bootstrap and ucb need ensemble_size >= 2"),
            (0.0 <= self.prior_scale < math.inf, "prior_scale must be finite and >= 0"),
            (0.0 < self.mask_prob <= 1.0, "mask_prob must be in (0, 1]"),
            (0.0 <= self.ucb_lambda < math.inf, "ucb_lambda must be finite and >= 0"),
            (self.posterior_shards >= 1 and self.posterior_period >= 1 and self.posterior_sweeps >= 1,
             "posterior_shards, posterior_period and posterior_sweeps must be >= 1"),
            (self.posterior_features in ("hidden", "observation") and self.posterior_targets in ("network", "sampled"),
             "posterior_features must be hidden or observation, posterior_targets network or sampled"),
            (0.0 < self.posterior_prior_var < math.inf and 0.0 < self.posterior_noise_var < math.inf,
             "posterior_prior_var and posterior_noise_var must be finite and > 0"),
            (self.posterior_server in ("local", "ray"), "posterior_server must be local or ray"),
            (self.posterior_server == "local" or (self.posterior_features == "observation"
                                                  and self.posterior_targets == "sampled"),
             "posterior_server=ray keeps each shard's features on its worker, so it needs features that do not "
             "move: posterior_features=observation and posterior_targets=sampled"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)


def noisy_mlp(in_dim: int, hidden, out_dim: int, sigma0: float) -> nn.Sequential:
    """An MLP whose every linear layer is a factorised NoisyLinear (the fully connected layers of NoisyNet-DQN)."""
    return mlp(in_dim, hidden, out_dim, linear=functools.partial(NoisyLinear, sigma0=sigma0))


class DQNAgent(AgentBase):
    Config = DQNConfig
    # the run's replay/update schedule unless --set changes it (agents/schedule.py)
    schedule = Schedule(replay_capacity=10_000, learning_starts=128, update_every=1, updates_per_step=1,
                        batch_size=128)

    def __init__(self, observation_space: spaces.Dict, action_space: spaces.Space, config: DQNConfig,
                 device: torch.device | str = "cpu"):
        if not isinstance(action_space, spaces.Discrete):
            raise ConfigError(f"dqn needs a discrete action space, this environment has {action_space}")
        config.validate()
        self.config = config
        self.device = torch.device(device)
        self.layout = ObsLayout(observation_space)
        self.num_actions = int(action_space.n)
        obs_dim, cfg = self.layout.dim, config
        if cfg.exploration == "noisy":
            self.online = Ensemble(lambda: noisy_mlp(obs_dim, cfg.hidden, self.num_actions, cfg.noisy_sigma0), 1)
        elif cfg.exploration in ("epsilon", "thompson"):
            self.online = Ensemble(lambda: mlp(obs_dim, cfg.hidden, self.num_actions), 1)
        else:
            self.online = Ensemble(lambda: mlp(obs_dim, cfg.hidden, self.num_actions), cfg.ensemble_size,
                                   prior_scale=cfg.prior_scale)
        self.online.to(self.device)
        self.target = frozen_copy(self.online)
        self.optimizer = torch.optim.Adam([p for p in self.online.parameters() if p.requires_grad], lr=cfg.lr,
                                          foreach=True)  # one multi-tensor step over all heads: less overhead
        self.updates = 0
        self.actor_steps = 0
        self.head = 0  # the bootstrap head acting in this episode
        self.mask_salt = int(torch.randint(2**62, ()))
        self._acting_noise: list[torch.Tensor] | None = None
        self.posterior = None
        if cfg.exploration == "thompson":
            width = cfg.hidden[-1] if cfg.posterior_features == "hidden" else obs_dim
            sizes = (width + 1, self.num_actions, cfg.posterior_shards, cfg.posterior_prior_var,
                     cfg.posterior_noise_var)
            self.posterior = ShardedLinearPosterior(*sizes) if cfg.posterior_server == "local" else \
                RayShardedPosterior(*sizes, gamma=cfg.discount, address=cfg.posterior_address)
            self.sampled_weights = self.posterior.sample()
            self.refitted_at = 0   # actor steps at the last refit of the sites

    @property
    def ensemble(self) -> bool:
        return self.config.exploration in ("bootstrap", "ucb")

    # -- acting ----------------------------------------------------------------------------------------------
    def epsilon(self) -> float:
        cfg = self.config
        if cfg.exploration != "epsilon":
            return 0.0
        fraction = min(self.actor_steps / cfg.epsilon_decay_steps, 1.0) if cfg.epsilon_decay_steps else 1.0
        return cfg.epsilon_start + fraction * (cfg.epsilon_end - cfg.epsilon_start)

    def _noise_buffers(self) -> list[torch.Tensor]:
        return [b for m in self.online.modules() if isinstance(m, NoisyLinear) for b in m.buffers()]

    def begin_episode(self) -> None:
        """Per-episode exploration: draw the Thompson head (bootstrap) or the episode's noise (noisy, episode)."""
        cfg = self.config
        if cfg.exploration == "bootstrap":
            self.head = self.online.sample_member()
        elif cfg.exploration == "thompson":
            self.sampled_weights = self.posterior.sample()
        elif cfg.exploration == "noisy" and cfg.noise_resample == "episode":
            reset_noise(self.online)
            self._acting_noise = [b.clone() for b in self._noise_buffers()]

    @torch.no_grad()
    def q_values(self, obs: np.ndarray, deterministic: bool = False) -> torch.Tensor:
        """Q_k(s, .) of every head, [K, A], for one flat observation (means of noisy layers if deterministic)."""
        x = torch.as_tensor(obs, dtype=torch.float32, device=self.device).unsqueeze(0)
        if not deterministic:
            return self.online(x)[:, 0]
        self.online.eval()
        try:
            return self.online(x)[:, 0]
        finally:
            self.online.train()

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> tuple[int, float]:
        """An action index and its behaviour log-probability. Thompson, UCB and noisy acting are deterministic
        given the sampled head/noise, so their log-probability is 0; epsilon-greedy's is its mixture's."""
        cfg = self.config
        if deterministic:
            return int(self.q_values(obs, deterministic=True).mean(0).argmax()), 0.0
        self.actor_steps += 1
        if cfg.exploration == "noisy":
            if cfg.noise_resample == "step" or self._acting_noise is None:
                reset_noise(self.online)
            else:
                for buffer, saved in zip(self._noise_buffers(), self._acting_noise):
                    buffer.copy_(saved)
        if cfg.exploration == "thompson":
            x = torch.as_tensor(obs, dtype=torch.float32, device=self.device).unsqueeze(0)
            return int((self.features(x)[0].double().cpu() @ self.sampled_weights.T).argmax()), 0.0
        q = self.q_values(obs)
        if cfg.exploration == "bootstrap":
            return int(q[self.head].argmax()), 0.0
        if cfg.exploration == "ucb":
            return int(ucb_action(q, cfg.ucb_lambda)), 0.0
        greedy = int(q[0].argmax())
        if cfg.exploration == "noisy":
            return greedy, 0.0
        eps = self.epsilon()
        action = int(torch.randint(self.num_actions, ())) if float(torch.rand(())) < eps else greedy
        prob = eps / self.num_actions + (1.0 - eps) * (action == greedy)
        return action, math.log(prob)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """phi(s) [N, hidden + 1]: the Q-network's last hidden layer and a constant (the Bayesian layer's input)."""
        inputs = self.online.members[0][:-1](x) if self.config.posterior_features == "hidden" else x
        return torch.cat([inputs, torch.ones(len(x), 1, device=x.device)], dim=-1)

    # -- learning --------------------------------------------------------------------------------------------
    @torch.no_grad()
    def refresh(self, replay, actor_steps: int) -> dict:
        """thompson: every ``posterior_period`` actor steps, refit each replay shard's site to the current features
        and targets (``posterior_sweeps`` times) and push it to the posterior server (agents/posterior_head.py)."""
        cfg = self.config
        if self.posterior is None or actor_steps - self.refitted_at < cfg.posterior_period \
                or not replay.can_sample():
            return {}
        self.refitted_at = actor_steps
        data = {k: torch.as_tensor(v, device=self.device) for k, v in replay.transitions().items()}
        obs, next_obs, action = data["obs"], data["next_obs"], data["action"][:, 0].long()
        features, next_features = self.features(obs).double().cpu(), self.features(next_obs).double().cpu()
        reward, discount = data["reward"].double().cpu(), data["discount"].double().cpu()
        shard = (data["write_id"] % cfg.posterior_shards).cpu()
        if cfg.posterior_targets == "network":   # the Double-DQN targets the network itself learns from
            best = self.online(next_obs)[0].argmax(-1, keepdim=True)
            next_value = self.target(next_obs)[0].gather(-1, best)[:, 0].double().cpu()
        draw = self.sampled_weights   # the episode's own draw keeps acting; the sweeps use draws of their own
        if isinstance(self.posterior, RayShardedPosterior):   # the shards' workers hold the data and refit
            self.posterior.sync(data["write_id"].cpu(), features, action.cpu(), reward, discount, next_features)
        for _ in range(cfg.posterior_sweeps):
            if isinstance(self.posterior, RayShardedPosterior):
                self.posterior.refit(draw)
            elif cfg.posterior_targets == "sampled":   # a posterior draw bootstraps its own targets (RLSVI, Osband
                #     et al. 2016): the uncertainty of what lies ahead reaches the states before it, one sweep a step
                target = sampled_targets(reward, discount, next_features, draw, cfg.discount)
                self.posterior.refresh(features, action.cpu(), target, shard)
            else:
                self.posterior.refresh(features, action.cpu(), reward + cfg.discount * discount * next_value, shard)
            draw = self.posterior.sample()
        mean, cov = self.posterior.moments()
        return {"posterior/weight_std": cov.diagonal(dim1=-2, dim2=-1).sqrt().mean().item(),
                "posterior/transitions": float(len(obs))}

    def head_masks(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """[B, K] bootstrap masks: fixed per transition from its write id when the batch carries one."""
        n, heads, p = batch["obs"].shape[0], len(self.online), self.config.mask_prob
        if not self.ensemble or p >= 1.0:
            return torch.ones(n, heads, device=self.device)
        if "write_id" in batch:
            write_id = batch["write_id"]
            write_id = write_id[:, 0] if write_id.dim() > 1 else write_id  # one-step: the sequence's first step
            return fixed_bootstrap_mask(write_id, heads, p, self.mask_salt).to(self.device)
        return bootstrap_mask(n, heads, p, device=self.device)

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        cfg = self.config
        obs, next_obs = batch["obs"][:, 0], batch["obs"][:, 1]
        action = batch["action"][:, 0, 0].long()
        reward, discount, valid = batch["reward"][:, 0], batch["discount"][:, 0], batch["mask"][:, 0]
        n, heads = obs.shape[0], len(self.online)
        if cfg.exploration == "noisy":  # fresh, independent noise for the online and the target network
            reset_noise(self.online)
            reset_noise(self.target)

        q_both = self.online(torch.cat([obs, next_obs]))  # [K, 2B, A]: one noise sample for s and s'
        q = q_both[:, :n].gather(-1, action.view(1, n, 1).expand(heads, n, 1)).squeeze(-1)  # [K, B]
        with torch.no_grad():  # Double DQN: the online head picks a', its target copy evaluates it
            best = q_both[:, n:].argmax(-1, keepdim=True)
            q_next = self.target(next_obs).gather(-1, best).squeeze(-1)
            targets = reward + cfg.discount * discount * q_next  # [K, B]
        masks = self.head_masks(batch) * valid.unsqueeze(1)  # [B, K]
        loss = masked_ensemble_loss((targets - q).pow(2), masks)
        gradient_step(self.optimizer, loss, self.online.parameters(), cfg.grad_clip)
        self.updates += 1
        if self.updates % cfg.target_period == 0:
            hard_update(self.target, self.online)

        metrics = {"loss/q": loss.item(), "q/mean": q.detach().mean().item(),
                   "q/target_mean": targets.mean().item()}
        if cfg.exploration == "epsilon":
            metrics["exploration/epsilon"] = self.epsilon()
        elif cfg.exploration == "noisy":
            sigmas = [m.weight_sigma.abs().mean() for m in self.online.modules() if isinstance(m, NoisyLinear)]
            metrics["noisy/mean_abs_sigma"] = torch.stack(sigmas).mean().item()
        else:
            metrics["ensemble/q_std"] = q.detach().std(0, correction=0).mean().item()
            metrics["bootstrap/mask_fraction"] = masks.mean().item()
            metrics["bootstrap/fixed_masks"] = float("write_id" in batch)
        return metrics

    # -- checkpointing ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        state = {"online": self.online.state_dict(), "target": self.target.state_dict(),
                 "optimizer": self.optimizer.state_dict(), "updates": self.updates,
                 "actor_steps": self.actor_steps, "head": self.head, "mask_salt": self.mask_salt}
        if self.posterior is not None:
            state["posterior"] = self.posterior.state_dict()
            state["sampled_weights"], state["refitted_at"] = self.sampled_weights, self.refitted_at
        if self._acting_noise is not None:
            state["acting_noise"] = {str(i): t.clone() for i, t in enumerate(self._acting_noise)}
        return state

    def load_state_dict(self, state: dict) -> None:
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates, self.actor_steps = int(state["updates"]), int(state["actor_steps"])
        self.head, self.mask_salt = int(state["head"]), int(state["mask_salt"])
        if self.posterior is not None:
            self.posterior.load_state_dict(state["posterior"])
            self.sampled_weights = state["sampled_weights"].double().cpu()
            self.refitted_at = int(state["refitted_at"])
        if "acting_noise" in state:
            saved = state["acting_noise"]
            self._acting_noise = [saved[str(i)].to(self.device) for i in range(len(saved))]
