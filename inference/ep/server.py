"""The posterior server: asynchronous SNEP on Ray (seed 000 Alg 8; seed 003 Ch 4 Algorithm 1, §4 and App. B).

Extraction: ``../shared/research/seed000.md`` §3.4 and ``seed003.md`` §3.4. One server actor holds
theta_post = theta_0 + sum_i lambda_i and applies the workers' deltas in arrival order; worker i holds a data shard,
an MCMC state and its site lambda_i and, asynchronously, runs

    x_i <- K_i(. | x_i; theta'_i - lambda_i / beta_i, beta_i)           tilted distribution (20), MCMC step (21)
    gamma_i <- gamma_i + eps (s(x_i) - grad A(theta_-i + lambda_i));  lambda_i = grad A*(gamma_i)          (22)
    every N_outer steps: theta'_i <- theta_-i + lambda_i                                                    (23)
    every N_sync steps, without waiting: send Delta_i = lambda_i - lambda_i_old, lambda_i_old <- lambda_i;
        when the reply theta_post arrives: theta_-i <- theta_post - lambda_i_old

Messages are natural-parameter deltas; the server only adds. A worker never waits for the server: if the reply to
its previous push has not arrived at its next sync, it skips that sync and keeps sampling (one push in flight).

Fault tolerance (not in the seed, which ran Julia processes without it):
- the server records, with every push, the worker's site as the server sees it, its MCMC state and its step count;
  a worker that dies is restarted by Ray and resumes from that record (its last synced state);
- the server applies a delta only if it is finite and leaves theta_post a proper Gaussian; a bad delta is refused
  with one error and the server's state is untouched. The invariant theta_post = theta_0 + sum_i lambda_i is checked
  after every update;
- the server's state is checkpointed (``server.safetensors`` with the tensors, ``server.json`` with the counters and
  settings, each written to a temporary file and renamed) every ``checkpoint_every`` pushes; a restarted server
  resumes from it. A worker's reply carries the server's copy of its site, so a delta lost with a restarted server
  is sent again at the next sync.

``run`` drives a whole run on a local Ray cluster (default) or the one at ``address``. The sites of workers are
natural parameters of ``family`` (``DiagGaussian`` for networks, as in the seed; ``FullGaussian`` for small models).
"""
from __future__ import annotations

import copy
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch
from torch import Tensor

from inference.ep.expfam import DiagGaussian, FullGaussian, add
from inference.ep.snep import natural_gradient_step, power_beta

__all__ = ["SNEPSettings", "PosteriorServer", "SNEPWorker", "ServerError", "SNEPRun", "run", "FAMILIES"]

Pair = tuple[Tensor, Tensor]
FAMILIES = {"diag": DiagGaussian, "full": FullGaussian}


class ServerError(ValueError):
    """A delta or a checkpoint the server refuses; its state is unchanged."""


@dataclass(frozen=True)
class SNEPSettings:
    """Seed 003 §6.2.1's defaults where it gives them (N_sync = N_outer = 10, SNEP learning rate 0.02)."""
    lr: float = 0.02                 # eps_t, constant
    n_sync: int = 10                 # steps between pushes
    n_outer: int = 10                # steps between outer updates (23)
    power: float | str = "parallel"  # beta_i: a number, or "parallel" for p-SNEP's 1 / N_workers
    family: str = "full"             # "full" or "diag"
    checkpoint_every: int = 1        # pushes between server checkpoints
    min_site_variance: Optional[float] = None   # diag family: each site's variance floor (the seed's 0.01 for nets)

    def validate(self, workers: int) -> None:
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        for name in ("n_sync", "n_outer", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {self.family!r}")
        if workers < 1:
            raise ValueError("need at least one worker (one data shard each)")
        if self.min_site_variance is not None and (self.family != "diag" or not self.min_site_variance > 0):
            raise ValueError("min_site_variance must be positive and needs the diag family")
        self.beta(workers)           # raises for a bad power

    def beta(self, workers: int) -> float:
        return power_beta(self.power, workers)


def owned(value):
    """Copies of the tensors in a value from ``ray.get``: Ray may hand back tensors that share memory with its object
    store, which is reused once the reference is dropped."""
    if isinstance(value, Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return type(value)(owned(v) for v in value)
    if isinstance(value, dict):
        return {k: owned(v) for k, v in value.items()}
    return value


def _finite(p: Pair) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in p)


# -- the server ------------------------------------------------------------------------------------------------------


class PosteriorServer:
    """theta_post, the sites as the server has received them, and each worker's last pushed MCMC state and step.
    Run as a Ray actor by ``run`` (``max_restarts=-1``); usable in-process too (the tests check it both ways)."""

    def __init__(self, theta0: Pair, initial_sites: Sequence[Pair], family: str = "full",
                 checkpoint_dir: Optional[str] = None, checkpoint_every: int = 1):
        self.family = FAMILIES[family]
        self.family_name = family
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.checkpoint_every = checkpoint_every
        if self.checkpoint_dir and (self.checkpoint_dir / "server.safetensors").is_file():
            self._load()
            self.resumed = True
            return
        self.theta0 = tuple(t.double().clone() for t in theta0)
        self.sites = [tuple(t.double().clone() for t in site) for site in initial_sites]
        self.positions: list[Optional[Tensor]] = [None] * len(self.sites)
        self.steps = [0] * len(self.sites)
        self.pushes = 0
        self.theta_post = self.theta0
        for site in self.sites:
            self.theta_post = add(self.theta_post, site)
        self.family.moments_from_natural(self.theta_post)        # the start must be a proper Gaussian
        self.resumed = False
        self._save()

    # Alg 8 lines 19-22: theta_post += Delta_i, reply theta_post (and the server's copy of lambda_i)
    def push(self, worker: int, delta: Pair, position: Optional[Tensor] = None, step: int = 0) -> tuple[Pair, Pair]:
        if not 0 <= worker < len(self.sites):
            raise ServerError(f"no worker {worker}: the server holds {len(self.sites)} sites")
        delta = tuple(t.double() for t in delta)
        if not _finite(delta) or any(d.shape != s.shape for d, s in zip(delta, self.sites[worker])):
            raise ServerError(f"worker {worker} sent a delta that is not finite or has the wrong shape; refused "
                              "(the server's state is unchanged)")
        new_post = add(self.theta_post, delta)
        try:
            self.family.moments_from_natural(new_post)
        except ValueError:
            raise ServerError(f"worker {worker}'s delta would leave theta_post outside the Gaussian family; refused "
                              "(the server's state is unchanged)") from None
        self.theta_post = new_post
        self.sites[worker] = add(self.sites[worker], delta)
        if position is not None:
            self.positions[worker] = position.detach().clone()
        self.steps[worker] = max(self.steps[worker], int(step))
        self.pushes += 1
        if not self.check_invariant():
            raise ServerError("theta_post drifted from theta_0 + sum of sites")   # a bug, never a worker's doing
        if self.checkpoint_dir and self.pushes % self.checkpoint_every == 0:
            self._save()
        return self.theta_post, self.sites[worker]

    def worker_state(self, worker: int) -> dict:
        """What a (re)started worker resumes from: theta_post, its site, MCMC state and step count."""
        return {"theta_post": self.theta_post, "site": self.sites[worker], "position": self.positions[worker],
                "step": self.steps[worker]}

    def snapshot(self) -> dict:
        return {"theta_post": self.theta_post, "sites": list(self.sites), "pushes": self.pushes,
                "steps": list(self.steps), "resumed": self.resumed}

    def check_invariant(self, rtol: float = 1e-9) -> bool:
        total = self.theta0
        for site in self.sites:
            total = add(total, site)
        scale = max(1.0, *(float(t.abs().max()) for t in total))
        return all(torch.allclose(a, b, rtol=0.0, atol=rtol * scale) for a, b in zip(total, self.theta_post))

    def pid(self) -> int:
        return os.getpid()

    # -- checkpoints: safetensors for the tensors, JSON for the rest, each replaced atomically ------------------------
    def _save(self) -> None:
        if not self.checkpoint_dir:
            return
        from safetensors.torch import save_file

        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        tensors = {"theta0.0": self.theta0[0], "theta0.1": self.theta0[1],
                   "theta_post.0": self.theta_post[0], "theta_post.1": self.theta_post[1]}
        for i, site in enumerate(self.sites):
            tensors[f"site{i}.0"], tensors[f"site{i}.1"] = site
            if self.positions[i] is not None:
                tensors[f"position{i}"] = self.positions[i]
        meta = {"family": self.family_name, "workers": len(self.sites), "pushes": self.pushes, "steps": self.steps,
                "checkpoint_every": self.checkpoint_every}
        tmp = self.checkpoint_dir / "server.safetensors.tmp"
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata={"pushes": str(self.pushes)})
        os.replace(tmp, self.checkpoint_dir / "server.safetensors")
        tmp = self.checkpoint_dir / "server.json.tmp"
        tmp.write_text(json.dumps(meta, indent=1))
        os.replace(tmp, self.checkpoint_dir / "server.json")

    def _load(self) -> None:
        from safetensors import SafetensorError, safe_open

        path = self.checkpoint_dir / "server.safetensors"
        try:
            meta = json.loads((self.checkpoint_dir / "server.json").read_text())
            with safe_open(str(path), "pt") as f:
                pushes = int(f.metadata()["pushes"])
                t = {k: f.get_tensor(k) for k in f.keys()}
            n = int(meta["workers"])
            if meta["family"] != self.family_name:
                raise ServerError(f"the checkpoint in {self.checkpoint_dir} is of family {meta['family']!r}, "
                                  f"not {self.family_name!r}")
            self.theta0 = (t["theta0.0"], t["theta0.1"])
            self.theta_post = (t["theta_post.0"], t["theta_post.1"])
            self.sites = [(t[f"site{i}.0"], t[f"site{i}.1"]) for i in range(n)]
            self.positions = [t.get(f"position{i}") for i in range(n)]
        except (OSError, KeyError, ValueError, SafetensorError) as e:
            if isinstance(e, ServerError):
                raise
            raise ServerError(f"the server checkpoint in {self.checkpoint_dir} is unreadable ({e}); move it away to "
                              "start afresh") from None
        # the JSON may be one push behind the tensors if the process died between the two renames
        self.pushes, self.steps = pushes, list(meta["steps"])
        if not self.check_invariant():
            raise ServerError(f"the server checkpoint in {self.checkpoint_dir} breaks theta_post = theta_0 + sum of "
                              "sites; move it away to start afresh")


# -- a worker --------------------------------------------------------------------------------------------------------


class SNEPWorker:
    """Worker ``index`` of Alg 8: its shard (anything with ``tilted_mean(theta, beta, generator) -> mean pair`` and a
    ``state`` MCMC position, e.g. ``snep.SampledShard`` or ``snep.GaussianShard``) and its site. Construction asks
    the server for the worker's record, so a worker that Ray restarts resumes from its last push."""

    def __init__(self, index: int, shard, server, settings: SNEPSettings, workers: int, seed: int = 0,
                 threads: int = 1):
        torch.set_num_threads(threads)
        shard = copy.deepcopy(shard)      # own its tensors: Ray's may share memory with the object store (``owned``)
        self.index, self.shard, self.server, self.settings = index, shard, server, settings
        self.family = FAMILIES[settings.family]
        self.beta = settings.beta(workers)
        self.remote = hasattr(server.worker_state, "remote")      # a Ray actor handle, or an in-process server
        if self.remote:
            import ray

            record = owned(ray.get(server.worker_state.remote(index)))
        else:
            record = server.worker_state(index)
        self.site = record["site"]
        self.site_sent = record["site"]                      # lambda_i_old: what the server has of this site
        self.gamma = self.family.mean_from_natural(self.site)
        self.theta_rest = add(record["theta_post"], self.site, -1.0)     # theta_-i
        self.theta_prime = record["theta_post"]                           # theta'_i = theta_-i + lambda_i
        self.step = record["step"]
        if record["position"] is not None:
            self.shard.state = record["position"]
        self.generator = torch.Generator().manual_seed(seed * 100_003 + index * 1_009 + self.step)
        self.pending = None       # the push in flight: its Ray reference
        self.rejected = 0         # inner steps whose every halving left the mean domain

    def run(self, steps: int) -> int:
        """``steps`` inner steps (22) with outer updates and pushes on schedule; returns the worker's step count."""
        s = self.settings
        for _ in range(steps):
            tilted = add(self.theta_prime, self.site, -1.0 / self.beta)
            try:
                stats = self.shard.tilted_mean(tilted, self.beta, self.generator)
            except ValueError:             # the tilted distribution is not normalisable here: skip, as snep_round
                stats = None
            if stats is not None:
                if not _finite(stats):
                    raise FloatingPointError(f"worker {self.index}: the tilted moments are not finite at step "
                                             f"{self.step}; lower the MCMC step size")
                update = natural_gradient_step(self.family, self.gamma, stats, add(self.theta_rest, self.site), s.lr)
                if update is None:
                    self.rejected += 1
                else:
                    self.gamma, self.site = update
                    if s.min_site_variance is not None:     # precision -theta_2 at most 1 / floor
                        floor = -1.0 / s.min_site_variance
                        if bool((self.site[1] < floor).any()):     # the site's mean is kept
                            clamped = self.site[1].clamp(min=floor)
                            self.site = (self.site[0] * clamped / self.site[1], clamped)
                            self.gamma = self.family.mean_from_natural(self.site)
            self.step += 1
            if self.step % s.n_outer == 0:
                self.theta_prime = add(self.theta_rest, self.site)
            if self.step % s.n_sync == 0:
                self._sync()
        return self.step

    def _sync(self, wait: bool = False) -> None:
        """Alg 8 lines 11-16 without blocking: collect the reply to the previous push if it has arrived (else skip
        this sync), then push the site's change since. ``wait``: block for the reply, and push only if nothing is
        in flight (``flush``). With an in-process server (tests) the reply is there at once."""
        if self.pending is not None:
            if self.remote:
                import ray

                ready, _ = ray.wait([self.pending], timeout=None if wait else 0)
                if not ready:
                    return
                theta_post, site_on_server = owned(ray.get(self.pending))
            else:
                theta_post, site_on_server = self.pending
            self.pending = None
            self.site_sent = site_on_server
            self.theta_rest = add(theta_post, site_on_server, -1.0)
            if wait:
                return
        delta = add(self.site, self.site_sent, -1.0)
        self.site_sent = self.site
        args = (self.index, delta, getattr(self.shard, "state", None), self.step)
        self.pending = self.server.push.remote(*args) if self.remote else self.server.push(*args)

    def flush(self) -> int:
        """Collect the reply in flight, push what is left and wait for its reply (the end of a run)."""
        self._sync(wait=True)          # collects the reply in flight (or, with none, pushes)
        if self.pending is None:
            self._sync()               # pushes what is left
        self._sync(wait=True)          # collects its reply
        return self.step

    def pid(self) -> int:
        return os.getpid()


# -- a run -----------------------------------------------------------------------------------------------------------


@dataclass
class SNEPRun:
    theta_post: Pair
    sites: list
    pushes: int
    steps: list
    wall_s: float
    restarts: int                      # worker deaths the run recovered from


def run(shards: Sequence, prior_mean: Tensor, prior_var: Tensor, steps: int, settings: SNEPSettings = SNEPSettings(),
        site_var: float = 1.0, chunk: int = 50, address: Optional[str] = None, num_cpus: Optional[int] = None,
        checkpoint_dir: Optional[str] = None, seed: int = 0, on_round=None, kill=None,
        max_lead: Optional[int] = 4) -> SNEPRun:
    """SNEP with one Ray worker actor per shard and a posterior server actor, each worker running ``steps`` inner
    steps (in calls of ``chunk``). ``prior_var``: a vector (diag family) or a covariance matrix (full family). Sites
    start as N(0, site_var) per coordinate. ``on_round(seconds, snapshot)`` is called after every returned worker
    call (for traces); ``kill(calls) -> worker index, "server" or None`` kills that process (fault-tolerance tests and
    demonstrations). ``checkpoint_dir`` with a server checkpoint in it resumes that run.

    ``max_lead``: a worker is given its next call only while it is fewer than ``max_lead`` calls ahead of the
    slowest unfinished worker (bounded staleness); None lets every worker run freely, as Alg 8. Alg 8 has no bound,
    and then the result depends on timing: a worker that starts late (Ray start-up) or is starved of CPU finds the
    others finished, its site still far from its fixed point and no steps left. The pushes stay asynchronous
    either way, and every worker is started before the first call."""
    import ray

    from cluster import ClusterError, connect_ray

    settings.validate(len(shards))
    if max_lead is not None and max_lead < 1:
        raise ValueError(f"max_lead must be at least 1 call (or None for no bound), got {max_lead}")
    family = FAMILIES[settings.family]
    d = prior_mean.numel()
    prior_mean = prior_mean.double()
    if settings.family == "full":
        theta0 = family.natural_from_moments(prior_mean, prior_var.double())
        site = family.natural_from_moments(torch.zeros(d, dtype=torch.float64),
                                           site_var * torch.eye(d, dtype=torch.float64))
    else:
        theta0 = family.natural_from_moments(prior_mean, prior_var.double().expand(d))
        site = family.natural_from_moments(torch.zeros(d, dtype=torch.float64),
                                           torch.full((d,), float(site_var), dtype=torch.float64))
    if address is None and num_cpus is None:
        num_cpus = max(os.cpu_count() or 1, len(shards))
    started = connect_ray(address, num_cpus)
    try:
        cpus = ray.cluster_resources().get("CPU", 0)
        if cpus < len(shards):       # a worker that cannot be placed would leave the run waiting forever
            raise ClusterError(f"{len(shards)} workers need {len(shards)} CPUs but the Ray cluster has {cpus:g}; "
                               f"{'start the local cluster with num_cpus >= the number of workers' if started else 'add nodes or use fewer shards'}")
        server = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)(PosteriorServer).remote(
            theta0, [site] * len(shards), settings.family, checkpoint_dir, settings.checkpoint_every)
        worker_cls = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=0)(SNEPWorker)
        workers = [worker_cls.remote(i, shard, server, settings, len(shards), seed) for i, shard in enumerate(shards)]
        ray.get([w.pid.remote() for w in workers])          # every worker is up before any of them steps
        start = time.monotonic()
        done = ray.get(server.snapshot.remote())["steps"]
        restarts, calls_made = 0, 0
        calls, parked = {}, set()

        def give_calls(candidates):
            """The next call of each candidate not too far ahead of the slowest unfinished worker (else parked)."""
            unfinished = [done[j] for j in range(len(shards)) if done[j] < steps]
            for j in candidates:
                if done[j] >= steps:
                    continue
                if max_lead is not None and done[j] - min(unfinished) >= max_lead * chunk:
                    parked.add(j)
                else:
                    parked.discard(j)
                    calls[workers[j].run.remote(min(chunk, steps - done[j]))] = j

        give_calls(range(len(shards)))
        while calls:                      # a worker goes on as soon as its own call returns (within max_lead)
            victim = kill(calls_made) if kill else None
            if victim is not None:
                actor = server if victim == "server" else workers[victim]
                os.kill(ray.get(actor.pid.remote()), 9)
            (ref,), _ = ray.wait(list(calls), num_returns=1)
            i = calls.pop(ref)
            try:
                done[i] = ray.get(ref)
            except ray.exceptions.RayActorError:          # the worker died; Ray restarts it from the server's record
                restarts += 1
                done[i] = ray.get(server.worker_state.remote(i))["step"]
            calls_made += 1
            give_calls([i, *sorted(parked)])
            if on_round:
                on_round(time.monotonic() - start, owned(ray.get(server.snapshot.remote())))
        ray.get([w.flush.remote() for w in workers])
        snap = owned(ray.get(server.snapshot.remote()))
        if not ray.get(server.check_invariant.remote()):
            raise ServerError("the invariant theta_post = theta_0 + sum of sites does not hold at the end")
        return SNEPRun(snap["theta_post"], snap["sites"], snap["pushes"], snap["steps"], time.monotonic() - start,
                       restarts)
    finally:
        if started:
            ray.shutdown()


def posterior(theta_post: Pair, family: str = "full") -> Pair:
    """(mean, covariance or variance vector) of the server's q."""
    return FAMILIES[family].moments_from_natural(theta_post)

