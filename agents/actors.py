"""Where a run's experience comes from: the learner's own process, or distributed actors on Ray (seed 000 §6.1.2:
many actors feed one learner's replay with sequences and their behaviour log-probabilities).

Both sources hand the loop (agents/loop.py) ``Experience``: the streams that begin a fresh episode (with its first
observation) and the transitions taken since. A stream is one environment: actor a's environment e is stream
``a * num_envs + e``, so every environment's episodes stay whole sequences in the one replay (agents/replay.py).

``RayActors``: each actor is a Ray actor process with its own environments (agents/vector.py) and a copy of the
agent that only acts. It acts with the newest weights the learner published (``Agent.acting_state``) for
``chunk`` steps per environment and returns them; the learner writes them into replay, updates, publishes new
weights and asks that actor for the next chunk, so every actor works one chunk ahead of the learner while the
learner keeps its update ratio. The behaviour log-probabilities come from the weights the actor acted with, which
Retrace's truncated importance weights correct. A killed actor is restarted by Ray and begins fresh episodes; the
learner goes on, and nothing already in replay is lost. ``address``: None starts a local Ray cluster, ``auto`` or
``ray://host:port`` joins a running one.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from agents.protocol import TrainingDiverged
from agents.vector import EnvPool, EnvWorkerError
from cluster import connect_ray, one_line


class Transition(NamedTuple):
    stream: int
    action: Any
    log_prob: float  # log mu(a|s) of the acting policy
    reward: float
    terminated: bool
    obs: np.ndarray  # the flat state the step led to
    over: bool  # the episode ended (terminated or truncated)
    info: dict
    reset_obs: np.ndarray | None  # the next episode's first flat state, when ``over``


class Experience(NamedTuple):
    starts: list[tuple[int, np.ndarray]]  # (stream, first flat state) of episodes begun outside a transition
    transitions: list[Transition]


def act_and_step(agent, pool: EnvPool, layout, flats: list[np.ndarray], stream_offset: int = 0) -> list[Transition]:
    """One step of every environment in ``pool``, ``agent`` acting on ``flats`` (updated in place)."""
    acted = [agent.act(flat) for flat in flats]
    for action, _ in acted:  # caught here, before a simulator is fed NaN and fails with a less telling error
        if not np.all(np.isfinite(action)):
            raise TrainingDiverged("the policy produced a non-finite action; lower the learning rates (the *lr keys "
                                   "of `train.py --list`) or set grad_clip; the last checkpoint is intact")
    out = []
    for i, ((action, log_prob), step) in enumerate(zip(acted, pool.step([a for a, _ in acted]))):
        obs = layout.flatten(step.obs)
        reset = layout.flatten(step.reset_obs) if step.reset_obs is not None else None
        flats[i] = obs if reset is None else reset
        if reset is not None:
            agent.begin_episode()
        out.append(Transition(stream_offset + i, action, log_prob, step.reward, step.terminated, obs,
                              step.terminated or step.truncated, step.info, reset))
    return out


class LocalActor:
    """The learner's own process acts in ``pool`` with the learner's agent. ``resume``: a ``snapshot()`` from a
    checkpoint, whose episodes ``start`` continues where every environment can be restored (``resumed``)."""

    def __init__(self, agent, pool: EnvPool, layout, reset_seeds: list[int], resume: dict | None = None):
        self.agent, self.pool, self.layout, self.reset_seeds = agent, pool, layout, reset_seeds
        self.flats: list[np.ndarray] = []
        self.resume, self.resumed = resume, False

    def start(self) -> Experience:
        snapshot = self.resume
        if snapshot is not None and len(snapshot["envs"]) == self.pool.size:
            for i, state in enumerate(snapshot["envs"]):
                self.pool.set_state(i, state)
            self.flats = [np.asarray(flat, np.float32) for flat in snapshot["flats"]]
            self.resumed = True
            return Experience([], [])   # the episodes go on: nothing starts
        self.flats = [self.layout.flatten(self.pool.reset(i, seed=s)) for i, s in enumerate(self.reset_seeds)]
        self.agent.begin_episode()
        return Experience(list(enumerate(self.flats)), [])

    def snapshot(self) -> dict | None:
        """The episodes in progress (each environment's captured state and the observation the agent acts on
        next), or None if any environment cannot be captured."""
        states = [self.pool.get_state(i) for i in range(self.pool.size)]
        if not self.flats or any(state is None for state in states):
            return None
        return {"flats": [flat.copy() for flat in self.flats], "envs": states}

    def collect(self) -> Experience:
        return Experience([], act_and_step(self.agent, self.pool, self.layout, self.flats))

    def publish(self, agent) -> None:
        pass  # the learner's agent acts itself

    def close(self) -> None:
        self.pool.close()


class _ActorWorker:
    """A Ray actor: environments and an acting copy of the agent (built from its name and config)."""

    def __init__(self, make_env: Callable[[int], Any], seeds: list[int], agent_name: str, agent_config,
                 stream_offset: int):
        import torch

        import agents
        from agents.observations import ObsLayout

        torch.set_num_threads(1)
        probe = make_env(seeds[0])
        self.layout = ObsLayout(probe.observation_space)
        self.agent = agents.make(agent_name, probe.observation_space, probe.action_space, agent_config, "cpu")
        probe.close()
        self.pool = EnvPool(make_env, seeds)
        self.seeds, self.offset = seeds, stream_offset
        self.flats: list[np.ndarray] | None = None

    def collect(self, weights: dict, steps: int, lost: int = 0) -> Experience:
        """``steps`` steps per environment. ``lost`` > 0: the learner lost ``lost`` of this actor's chunks so far,
        the last just now, so the episodes in progress have a gap: begin new ones, on seeds not used before."""
        self.agent.load_acting_state(weights)
        starts = []
        if self.flats is None or lost:  # a new (or restarted) actor begins fresh episodes
            self.flats = [self.layout.flatten(self.pool.reset(i, seed=s + 1_000_003 * lost))
                          for i, s in enumerate(self.seeds)]
            starts = [(self.offset + i, flat) for i, flat in enumerate(self.flats)]
            self.agent.begin_episode()
        transitions = []
        for _ in range(steps):
            transitions += act_and_step(self.agent, self.pool, self.layout, self.flats, self.offset)
        return Experience(starts, transitions)

    def pid(self) -> int:
        return os.getpid()


MAX_CONSECUTIVE_FAILURES = 30  # deaths in a row (chunks lost to a dying actor) after which it counts as broken
RESTART_TIMEOUT_S = 300.0      # how long an actor may stay unavailable (restarting) before the run stops


class RayActors:
    """``count`` actor processes on Ray, each with ``len(seeds[a])`` environments, feeding this learner."""

    def __init__(self, make_env: Callable[[int], Any], seeds: list[list[int]], agent_name: str, agent_config,
                 agent, address: str | None, chunk: int):
        import ray

        self.started = connect_ray(address, None if address else max(os.cpu_count() or 1, len(seeds)))
        worker = ray.remote(num_cpus=1, max_restarts=-1)(_ActorWorker)
        self.actors = [worker.remote(make_env, s, agent_name, agent_config, a * len(s)) for a, s in enumerate(seeds)]
        self.chunk, self.restarts = chunk, 0
        self.failing = [0] * len(self.actors)  # consecutive deaths per actor
        self.unavailable_since: list[float | None] = [None] * len(self.actors)  # when an actor began restarting
        self.lost = [0] * len(self.actors)  # all lost chunks per actor
        self.weights = ray.put(agent.acting_state())
        self.pending: dict = {}

    def start(self) -> Experience:
        for a in range(len(self.actors)):
            self._request(a)
        return Experience([], [])  # actors report their episodes' first states with their first chunk

    def _request(self, a: int, lost: int = 0) -> None:
        self.pending[self.actors[a].collect.remote(self.weights, self.chunk, lost)] = a

    def collect(self) -> Experience:
        import ray

        done, _ = ray.wait(list(self.pending), num_returns=1)
        a = self.pending.pop(done[0])
        try:
            experience = ray.get(done[0])
        except ray.exceptions.RayTaskError as e:  # the actor's own code raised: a real error, not a lost process
            cause = e.cause if isinstance(e.cause, BaseException) else e
            raise EnvWorkerError(f"actor {a} failed: {one_line(cause)}") from None
        except ray.exceptions.ActorUnavailableError as e:  # still restarting (slow on a loaded machine): wait
            since = self.unavailable_since[a] = self.unavailable_since[a] or time.monotonic()
            if time.monotonic() - since > RESTART_TIMEOUT_S:
                raise EnvWorkerError(f"actor {a} did not come back within {RESTART_TIMEOUT_S:.0f} s "
                                     f"({one_line(e)})") from None
            time.sleep(1.0)
            return self._lost_chunk(a)
        except ray.exceptions.RayActorError as e:  # killed or crashed: Ray restarts it, its chunk is lost
            self.restarts += 1
            self.failing[a] += 1
            if self.failing[a] > MAX_CONSECUTIVE_FAILURES:
                raise EnvWorkerError(f"actor {a} keeps dying ({one_line(e)})") from None
            if self.failing[a] == 1:
                print(f"actor {a} died; Ray restarts it and the learner goes on", file=sys.stderr, flush=True)
            time.sleep(0.1 * self.failing[a])  # give the restart a moment before asking again
            return self._lost_chunk(a)
        self.failing[a], self.unavailable_since[a] = 0, None
        self._request(a)
        return experience

    def _lost_chunk(self, a: int) -> Experience:
        self.lost[a] += 1
        self._request(a, lost=self.lost[a])  # an actor that was only unreachable must not go on across the gap
        return Experience([], [])

    def publish(self, agent) -> None:
        import ray

        self.weights = ray.put(agent.acting_state())

    def snapshot(self) -> None:
        """Not captured: the actors are a chunk ahead of the learner, so a resumed run starts fresh episodes."""
        return None

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
        if self.started:
            ray.shutdown()
