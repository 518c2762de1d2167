"""A Bayesian last layer for Q-values whose posterior is a sum of per-shard sites on SNEP's posterior server.

Where the RL side uses the distributed posterior of inference/ep (issue 16; seed 003 §6 suggests sharing a
posterior across workers). Q(s, a) ~ w_a^T phi(s) for features phi(s) the agent chooses (agents/dqn.py: the
observation, or the Q-network's last hidden layer as in BDQN, Azizzadenesheli et al. 2018), with a constant 1:
- prior w_a ~ N(0, ``prior_var`` I); likelihood y ~ N(w_a^T phi(s), ``noise_var``) for the regression target y of
  every stored transition (s, a): the network's Double-DQN target, or RLSVI's r + gamma max_a' w~^T phi(s');
- the replay is split into ``shards`` (transition i belongs to shard ``write_id mod shards``: what that many actors,
  each keeping its own replay, would hold). Shard k's site is its data's likelihood in natural parameters,
  lambda_k = (sum phi y / noise_var, -sum phi phi^T / noise_var) per action. The likelihood is conjugate, so the
  sites are exact: EP's tilted moments need no estimate here and SNEP's sampling is not needed -- what is used is
  the server's decomposition theta_post = theta_0 + sum_k lambda_k (seed 000 Alg 8 lines 19-22; seed 003 Ch 4
  Algorithm 1), with its invariant checked after every push and refused deltas leaving it untouched;
- the features (when they are the network's) and the targets move as learning goes on, so ``refresh`` recomputes
  each shard's site for the current ones and pushes the change (delta = new - old), as an asynchronous SNEP worker
  pushes its site's change; refits on the same features reuse the sites' precisions;
- Thompson sampling: a weight vector per action is drawn from the posterior at the start of every episode and the
  agent acts greedily on w~^T phi(s) for the whole episode (deep exploration, Osband et al.).
The server runs in the learner's process here (``PosteriorServer`` is the same class that ``inference.ep.server.run``
puts on Ray for SNEP); the DeepSea comparison in docs/exploration.md measures this in-process form.
"""
from __future__ import annotations

import torch

from inference.ep.expfam import FullGaussian, Pair, add
from inference.ep.server import PosteriorServer


def linear_site(features: torch.Tensor, action: torch.Tensor, target: torch.Tensor, actions: int,
                noise_var: float, precision: torch.Tensor | None = None) -> Pair:
    """The exact site of y ~ N(w_a^T phi, noise_var) over transitions (phi [N, F], a [N], y [N]), per action:
    natural parameters ([A, F], [A, F, F]) in inference/ep's convention (theta_1 = Lambda mu, theta_2 = -Lambda).
    ``precision``: Lambda [A, F, F] if already known (it depends on the features, not on the targets)."""
    one_hot = torch.nn.functional.one_hot(action.long(), actions).to(features.dtype)     # [N, A]
    linear = torch.einsum("na,nf->af", one_hot * target.unsqueeze(-1), features) / noise_var
    if precision is None:
        precision = torch.einsum("na,nf,ng->afg", one_hot, features, features) / noise_var
    return linear, -precision


class ShardedLinearPosterior:
    """Per-action Bayesian linear regression on ``features`` inputs, one site per replay shard (module docstring)."""

    def __init__(self, features: int, actions: int, shards: int, prior_var: float = 1.0, noise_var: float = 1.0):
        if shards < 1 or prior_var <= 0 or noise_var <= 0:
            raise ValueError("shards >= 1, prior_var > 0 and noise_var > 0 are required")
        self.features, self.actions, self.shards, self.noise_var = features, actions, shards, noise_var
        eye = torch.eye(features, dtype=torch.float64).expand(actions, features, features)
        theta0 = (torch.zeros(actions, features, dtype=torch.float64), -eye / prior_var)
        empty = (torch.zeros_like(theta0[0]), torch.zeros_like(theta0[1]))
        self.server = PosteriorServer(theta0, [empty] * shards, family="full")
        self._moments: Pair | None = None
        self._precisions: tuple[torch.Tensor, list[torch.Tensor]] | None = None   # (features, per shard)

    def refresh(self, features: torch.Tensor, action: torch.Tensor, target: torch.Tensor,
                shard: torch.Tensor) -> None:
        """Replace every shard's site by the one for these transitions (phi [N, F], a [N], y [N], shard ids [N]).
        Refits on the same ``features`` tensor (new targets only) reuse the sites' precisions."""
        if self._precisions is None or self._precisions[0] is not features:
            self._precisions = (features, [None] * self.shards)
        precisions = self._precisions[1]
        features, target = features.double(), target.double()
        for k in range(self.shards):
            mine = shard == k
            new = linear_site(features[mine], action[mine], target[mine], self.actions, self.noise_var,
                              precisions[k])
            precisions[k] = -new[1]
            old = self.server.sites[k]
            self.server.push(k, add(new, old, scale=-1.0))
        self._moments = None

    def moments(self) -> Pair:
        """Posterior mean [A, F] and covariance [A, F, F]."""
        if self._moments is None:
            self._moments = FullGaussian.moments_from_natural(self.server.theta_post)
        return self._moments

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """One weight vector per action [A, F] drawn from the posterior."""
        mean, cov = self.moments()
        noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype)
        return mean + (torch.linalg.cholesky(cov) @ noise.unsqueeze(-1)).squeeze(-1)

    def state_dict(self) -> dict:
        return {f"site{k}.{i}": t for k, site in enumerate(self.server.sites) for i, t in enumerate(site)}

    def load_state_dict(self, state: dict) -> None:
        sites = [(state[f"site{k}.0"].double(), state[f"site{k}.1"].double()) for k in range(self.shards)]
        for k, site in enumerate(sites):   # through push: the server checks every site it takes
            self.server.push(k, add(site, self.server.sites[k], scale=-1.0))
        self._moments = None
