"""Several environments per actor, stepped in parallel worker processes (``--num-envs N``).

``EnvPool(make_env, seeds)`` builds one environment per seed: in this process when there is one, else one worker
process each (spawned, so MuJoCo and torch start clean), talking over pipes. ``step(actions)`` sends every action
first and then collects every result, so the N simulators run at the same time. A worker resets its environment
itself when an episode ends and returns the first observation of the next one with the step's result, saving a
round trip. A worker that dies (killed, out of memory) raises ``EnvWorkerError`` naming it; nothing else is lost,
and the run resumes from its last checkpoint.
"""
from __future__ import annotations

import multiprocessing as mp
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple


class EnvWorkerError(RuntimeError):
    """An environment worker process failed or died."""


class StepResult(NamedTuple):
    obs: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict
    reset_obs: Any  # the next episode's first observation when this step ended the episode, else None


def _step(env, action) -> StepResult:
    obs, reward, terminated, truncated, info = env.step(action)
    reset_obs = env.reset()[0] if terminated or truncated else None
    return StepResult(obs, float(reward), bool(terminated), bool(truncated), info, reset_obs)


def capture(env) -> dict | None:
    """The episode in progress of ``env`` (envs/dmc.py ``get_state``), or None where the environment -- or a
    wrapper around it, which may hold state of its own -- offers no capture."""
    getter = getattr(type(env), "get_state", None)
    return getter(env) if callable(getter) else None


def _worker(conn, make_env: Callable[[int], Any], seed: int) -> None:
    import signal

    import torch

    # Ctrl-C reaches the whole process group: the parent decides when to stop (after a checkpoint), not the workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    try:
        env = make_env(seed)
        conn.send(("ok", None))
        while True:
            command, arg = conn.recv()
            if command == "step":
                conn.send(("ok", _step(env, arg)))
            elif command == "reset":
                conn.send(("ok", env.reset(seed=arg)[0]))
            elif command == "get_state":
                conn.send(("ok", capture(env)))
            elif command == "set_state":
                env.set_state(arg)
                conn.send(("ok", None))
            elif command == "close":
                env.close()
                conn.send(("ok", None))
                return
    except (EOFError, KeyboardInterrupt):
        return
    except Exception as e:  # reported to the parent as one line plus the worker's traceback
        conn.send(("error", f"{e.__class__.__name__}: {e}\n{traceback.format_exc()}"))


class EnvPool:
    def __init__(self, make_env: Callable[[int], Any], seeds: list[int]):
        self.size = len(seeds)
        if self.size < 1:
            raise ValueError("an environment pool needs at least one environment")
        self.local = make_env(seeds[0]) if self.size == 1 else None
        self.conns, self.processes = [], []
        if self.local is None:
            ctx = mp.get_context("spawn")
            for seed in seeds:
                parent, child = ctx.Pipe()
                process = ctx.Process(target=_worker, args=(child, make_env, seed), daemon=True)
                process.start()
                child.close()
                self.conns.append(parent)
                self.processes.append(process)
            for i in range(self.size):
                self._receive(i)

    def _receive(self, i: int):
        try:
            status, value = self.conns[i].recv()
        except (EOFError, ConnectionResetError, BrokenPipeError):
            raise EnvWorkerError(f"environment worker {i} died (exit code {self.processes[i].exitcode}); "
                                 "resume the run from its last checkpoint") from None
        if status == "error":
            raise EnvWorkerError(f"environment worker {i} failed: {value.splitlines()[0]}")
        return value

    def _send(self, i: int, message) -> None:
        try:
            self.conns[i].send(message)
        except (BrokenPipeError, ConnectionResetError, OSError):
            raise EnvWorkerError(f"environment worker {i} died (exit code {self.processes[i].exitcode}); "
                                 "resume the run from its last checkpoint") from None

    def reset(self, i: int, seed: int | None = None):
        if self.local is not None:
            return self.local.reset(seed=seed)[0]
        self._send(i, ("reset", seed))
        return self._receive(i)

    def get_state(self, i: int) -> dict | None:
        """Environment i's episode in progress (``capture``), or None."""
        if self.local is not None:
            return capture(self.local)
        self._send(i, ("get_state", None))
        return self._receive(i)

    def set_state(self, i: int, state: dict) -> None:
        if self.local is not None:
            self.local.set_state(state)
            return
        self._send(i, ("set_state", state))
        self._receive(i)

    def step(self, actions: list) -> list[StepResult]:
        if self.local is not None:
            return [_step(self.local, actions[0])]
        for i, action in enumerate(actions):
            self._send(i, ("step", action))
        return [self._receive(i) for i in range(self.size)]

    def close(self) -> None:
        if self.local is not None:
            self.local.close()
            return
        for i, (conn, process) in enumerate(zip(self.conns, self.processes)):
            try:
                if process.is_alive():
                    conn.send(("close", None))
                    if conn.poll(5):  # a stuck worker is terminated below rather than waited for
                        conn.recv()
            except (EOFError, OSError):
                pass
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
        self.conns, self.processes = [], []
