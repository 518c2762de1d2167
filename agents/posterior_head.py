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
Two placements of the same computation:
- ``ShardedLinearPosterior``: the server and every shard's refit run in the learner's process (any features and
  targets);
- ``RayShardedPosterior``: the server is a Ray actor (the ``PosteriorServer`` that ``inference.ep.server.run`` puts
  on Ray for SNEP) and each shard lives on a Ray actor of its own (``ShardWorker``) that keeps its transitions and
  its site lambda_k; a refit broadcasts one posterior draw, every worker refits its own site on its own data and
  pushes the change to the server itself (Alg 8 lines 9-14 and 19-22). The learner sends each worker only the
  transitions it has not sent before. A killed worker is restarted by Ray, takes its site from the server's copy
  (as a restarted SNEP worker does) and is sent its shard again; a killed server is given back the learner's
  copy of the sites; so nothing is lost. The workers hold the features phi(s), so this placement needs features
  that do not move: the observation, with RLSVI's sampled targets (the defaults).
The sites are exact in both, so both give the same posterior (tested); docs/exploration.md measures both on DeepSea.
"""
from __future__ import annotations

import os
import sys

import torch

from inference.ep.expfam import FullGaussian, Pair, add
from inference.ep.server import PosteriorServer, owned


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


def sampled_targets(reward: torch.Tensor, discount: torch.Tensor, next_features: torch.Tensor, draw: torch.Tensor,
                    gamma: float) -> torch.Tensor:
    """RLSVI's regression targets r + gamma d max_a' w~_a'^T phi(s') for one posterior draw w~ [A, F]."""
    return reward + gamma * discount * (next_features @ draw.T).max(-1).values


class ShardWorker:
    """One replay shard on a Ray actor: its transitions (phi(s), a, r, d, phi(s') by write id) and its site lambda_k,
    which it refits on its own data for a posterior draw and pushes, as a change, to the posterior server."""

    def __init__(self, index: int, server, actions: int, noise_var: float, gamma: float):
        torch.set_num_threads(1)
        self.index, self.server = index, server
        self.actions, self.noise_var, self.gamma = actions, noise_var, gamma
        self.rows: dict[str, torch.Tensor] | None = None
        self.precision: torch.Tensor | None = None   # the site's precision for the rows held (targets do not move it)
        self.reload_site()

    def reload_site(self) -> None:
        """lambda_k as the server holds it: at a (re)start, and after the learner loaded a checkpoint."""
        import ray

        self.site = owned(ray.get(self.server.worker_state.remote(self.index)))["site"]

    def add(self, rows: dict[str, torch.Tensor], oldest: int, replace: bool = False) -> int:
        """Keep ``rows`` (write_id [N], features [N, F], action [N], reward [N], discount [N], next_features [N, F])
        besides those held (instead of them with ``replace``) and drop those with a write id below ``oldest``
        (they left the learner's replay); ``holding()`` after it."""
        rows = owned(rows)
        if self.rows is not None and not replace:
            rows = {k: torch.cat([self.rows[k], v]) for k, v in rows.items()}
        keep = rows["write_id"] >= oldest
        self.rows = {k: v[keep] for k, v in rows.items()}
        self.precision = None
        return self.holding()

    def holding(self) -> tuple[int, int]:
        """(this process's id, rows held): a restarted worker answers with another process id and no rows."""
        return self.pid(), 0 if self.rows is None else len(self.rows["write_id"])

    def refit(self, draw: torch.Tensor) -> None:
        """Replace lambda_k by the site of this shard's data for the targets of ``draw``, through the server."""
        import ray

        if self.rows is None:
            return
        rows = self.rows
        target = sampled_targets(rows["reward"], rows["discount"], rows["next_features"], owned(draw), self.gamma)
        new = linear_site(rows["features"], rows["action"], target, self.actions, self.noise_var, self.precision)
        self.precision = -new[1]
        _, self.site = owned(ray.get(self.server.push.remote(self.index, add(new, self.site, scale=-1.0))))

    def pid(self) -> int:
        return os.getpid()


class RayShardedPosterior(ShardedLinearPosterior):
    """``ShardedLinearPosterior`` with the server and the shards on Ray actors (module docstring). The Ray actors
    start at the first ``sync`` (an acting copy of the agent, which only samples, never starts any); until then and
    between refits, ``self.server`` is a local mirror of the Ray server's state, which ``sample``/``moments`` and
    checkpoints read."""

    def __init__(self, features: int, actions: int, shards: int, prior_var: float = 1.0, noise_var: float = 1.0,
                 gamma: float = 0.99, address: str | None = None):
        super().__init__(features, actions, shards, prior_var, noise_var)
        self.gamma, self.address = gamma, address or None
        self.remote_server, self.workers = None, []
        self.pushes = 0   # the Ray server's push count at the last look; a lower one means it restarted
        self.sent: list[tuple[int, int] | None] = [None] * shards   # each worker's (process id, rows) after the
        #     last sync; a worker that answers otherwise was restarted (or a checkpoint was loaded) and gets its shard anew
        self.sent_ids: torch.Tensor = torch.zeros(0, dtype=torch.long)

    def _start(self) -> None:
        import ray

        from cluster import connect_ray

        connect_ray(self.address)
        mirror = self.server
        self.remote_server = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)(PosteriorServer).remote(
            mirror.theta0, mirror.sites, "full")
        worker = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)(ShardWorker)
        self.workers = [worker.remote(k, self.remote_server, self.actions, self.noise_var, self.gamma)
                        for k in range(self.shards)]

    def sync(self, write_id: torch.Tensor, features: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
             discount: torch.Tensor, next_features: torch.Tensor) -> None:
        """Hand each shard's worker the replay's transitions it does not hold yet (transition i goes to shard
        ``write_id mod shards``) and let it drop those the replay no longer holds."""
        import ray

        if self.remote_server is None:
            self._start()
        self._follow_server()
        rows = {"write_id": write_id.long(), "features": features.double(), "action": action.long(),
                "reward": reward.double(), "discount": discount.double(), "next_features": next_features.double()}
        oldest = int(write_id.min()) if len(write_id) else 0
        holding = ray.get([w.holding.remote() for w in self.workers])
        fresh = ~torch.isin(rows["write_id"], self.sent_ids)
        calls = []
        for k, worker in enumerate(self.workers):
            mine = rows["write_id"] % self.shards == k
            resend = holding[k] != self.sent[k]
            if resend and self.sent[k] is not None and self.sent[k][1] > 0:
                print(f"posterior shard {k} lost its data (its Ray actor restarted); sending it again",
                      file=sys.stderr, flush=True)
            calls.append(worker.add.remote({key: v[mine if resend else mine & fresh] for key, v in rows.items()},
                                           oldest, resend))
        self.sent = ray.get(calls)
        self.sent_ids = rows["write_id"]

    def refit(self, draw: torch.Tensor) -> None:
        """Every worker refits its site for the targets of ``draw`` and pushes the change; then the mirror follows
        the server."""
        import ray

        ray.get([w.refit.remote(draw) for w in self.workers])
        self._follow_server()

    def _follow_server(self) -> None:
        """Mirror the Ray server's state; if it restarted (from its constructor's arguments, losing its sites),
        first give it back the mirror's sites, which its workers' lambda_k then follow."""
        import ray

        snapshot = owned(ray.get(self.remote_server.snapshot.remote()))
        if snapshot["pushes"] < self.pushes:
            print("the posterior server's Ray actor restarted; restoring its sites from the learner's copy",
                  file=sys.stderr, flush=True)
            self._restore_sites()
            snapshot = owned(ray.get(self.remote_server.snapshot.remote()))
        self.pushes = snapshot["pushes"]
        self.server.theta_post, self.server.sites = snapshot["theta_post"], list(snapshot["sites"])
        self._moments = None

    def _restore_sites(self) -> None:
        """Push the mirror's sites to the Ray server and let every worker take its lambda_k from there."""
        import ray

        for k, site in enumerate(self.server.sites):
            current = owned(ray.get(self.remote_server.worker_state.remote(k)))["site"]
            ray.get(self.remote_server.push.remote(k, add(site, current, scale=-1.0)))
        ray.get([w.reload_site.remote() for w in self.workers])

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if self.remote_server is not None:   # the Ray server and the workers' lambda_k follow the checkpoint
            self._restore_sites()
            self.pushes = 0
            self.sent, self.sent_ids = [None] * self.shards, torch.zeros(0, dtype=torch.long)   # send every shard anew

    def close(self) -> None:
        import ray

        for actor in [*self.workers, *([self.remote_server] if self.remote_server is not None else [])]:
            ray.kill(actor)
        self.remote_server, self.workers = None, []
