"""A generic fan-out on Ray: ``on_ray(fn, items)`` is ``[fn(item) for item in items]`` with one Ray task per item,
on a local cluster by default or a real one with ``address``. Used by the NPMP pipeline (experts, reports, data
collection) and the benchmarks that spread independent runs over cores or machines.

``on_processes`` is the same contract on a local process pool, for one machine where Ray is not installed (the
lent GPU machines: Ray's wheel is too large to carry there); ``fan_out`` picks one of the two."""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import threading
import time

from cluster.connection import connect_ray, one_line


class FanOutError(RuntimeError):
    """Some items of ``on_ray`` failed; the others completed. ``failures`` maps item names to one-line errors;
    ``results`` holds every result in item order, ``None`` where the item failed."""

    def __init__(self, failures: dict[str, str], results: list):
        self.failures, self.results = failures, results
        lines = "; ".join(f"{name}: {error}" for name, error in failures.items())
        super().__init__(f"{len(failures)} of {len(results)} failed -- {lines}")


def on_ray(fn, items, address: str | None = None, num_cpus: int | None = None, cpus_per_task: float = 1,
           label=str, quiet: bool = False, retries: int = 2) -> list:
    """``[fn(item) for item in items]`` with one Ray task per item, results in item order.

    ``address`` None starts a local cluster of ``num_cpus`` CPUs (default ``os.cpu_count()``) and shuts it down
    afterwards; ``"auto"`` or ``"ray://host:port"`` joins a running cluster. If Ray is already initialised in this
    process, that cluster is used and left running. Each task reserves ``cpus_per_task`` CPUs, so at most
    ``num_cpus / cpus_per_task`` items run at once. A line per finished item goes to stderr (unless ``quiet``).
    Items that raise do not stop the others; afterwards ``FanOutError`` names each failed item (``label(item)``)
    with its error and carries the results of the rest (labels should be unique). A task whose worker or node died
    (not one whose item raised) is re-run up to ``retries`` times: expert training resumes from its last
    checkpoint. ``fn``, ``items`` and results travel by (cloud)pickle: a module-level function of an installed
    module is sent by reference, a lambda or closure by value with what it captures.
    """
    import ray

    items = list(items)
    if not items:
        return []
    names = [label(item) for item in items]
    started = connect_ray(address, num_cpus)
    try:
        task = ray.remote(num_cpus=cpus_per_task, max_retries=retries)(fn)
        index = {task.options(name=name).remote(item): i for i, (name, item) in enumerate(zip(names, items))}
        results: list = [None] * len(items)
        failures: dict[str, str] = {}
        pending, start = list(index), time.monotonic()
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            i = index[done[0]]
            try:
                results[i] = ray.get(done[0])
                outcome = "done"
            except ray.exceptions.RayTaskError as e:   # the item's own exception, re-raised with Ray's wrapper
                cause = e.cause if isinstance(e.cause, BaseException) else e
                failures[names[i]] = one_line(cause)
                outcome = f"FAILED ({failures[names[i]]})"
            except ray.exceptions.RayError as e:       # the worker died (out of memory, node lost)
                failures[names[i]] = one_line(e)
                outcome = f"FAILED ({failures[names[i]]})"
            _report(quiet, len(items) - len(pending), len(items), names[i], outcome, start)
    finally:
        if started:
            ray.shutdown()
    if failures:
        raise FanOutError({n: failures[n] for n in names if n in failures}, results)
    return results


def _report(quiet: bool, finished: int, total: int, name: str, outcome: str, start: float) -> None:
    if not quiet:
        print(f"[{finished}/{total}] {name} {outcome} after {time.monotonic() - start:.0f} s", file=sys.stderr,
              flush=True)


def on_processes(fn, items, workers: int, label=str, quiet: bool = False) -> list:
    """``on_ray``'s contract on ``workers`` fresh local processes (spawned, one item each, so no state leaks between
    items): results in item order, a line per finished item, ``FanOutError`` naming the items that raised. ``fn``
    must pickle by reference (a module-level function, or ``functools.partial`` of one): no lambdas. The workers end
    with the caller, also when it is killed."""
    items = list(items)
    if not items:
        return []
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    names = [label(item) for item in items]
    results: list = [None] * len(items)
    failures: dict[str, str] = {}
    start = time.monotonic()
    try:
        with caller_bound_pool(min(workers, len(items))) as pool:
            handles = [pool.apply_async(fn, (item,)) for item in items]
            pending = set(range(len(items)))
            while pending:
                time.sleep(0.5)
                for i in [i for i in sorted(pending) if handles[i].ready()]:
                    pending.discard(i)
                    try:
                        results[i] = handles[i].get()
                        outcome = "done"
                    except Exception as e:  # the item's own exception; the others go on
                        failures[names[i]] = one_line(e)
                        outcome = f"FAILED ({failures[names[i]]})"
                    _report(quiet, len(items) - len(pending), len(items), names[i], outcome, start)
    except Terminated:
        raise SystemExit(128 + signal.SIGTERM) from None
    if failures:
        raise FanOutError({n: failures[n] for n in names if n in failures}, results)
    return results


class Terminated(BaseException):
    """SIGTERM reached the caller of ``caller_bound_pool``, whose workers are stopped. Not an ``Exception``, so a
    per-item ``except Exception`` does not swallow it."""


@contextlib.contextmanager
def caller_bound_pool(workers: int):
    """A pool of ``workers`` fresh spawned processes (one task each) that end with the caller. SIGTERM's default
    would kill the caller alone and leave the workers computing on as orphans: while the pool is open it raises
    ``Terminated`` instead, which leaves the ``with`` (terminating the pool); and each worker watches for its
    parent's death, which covers SIGKILL."""
    in_main_thread = threading.current_thread() is threading.main_thread()   # signal handlers live there only
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if in_main_thread else None
    try:
        with mp.get_context("spawn").Pool(workers, maxtasksperchild=1, initializer=_end_with_parent,
                                          initargs=(os.getpid(),)) as pool:
            yield pool
    finally:
        if in_main_thread:   # None: the handler before was not Python's (restore the default)
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _raise_terminated(signum, frame):
    raise Terminated


def _end_with_parent(parent: int) -> None:
    """Pool initializer: a daemon thread that ends this worker once ``parent`` (the caller) is no longer its parent
    process. Not prctl's PR_SET_PDEATHSIG: that fires when the *thread* that started the worker ends, and the pool's
    own worker-handler thread ends first when the pool terminates, killing idle workers that hold the task queue's
    lock and hanging the caller."""
    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()


def fan_out(fn, items, address: str | None = None, num_cpus: int | None = None, processes: int | None = None,
            label=str, quiet: bool = False) -> list:
    """``on_processes(fn, items, processes)`` when ``processes`` is given, else ``on_ray`` (one CPU per item)."""
    if processes is not None:
        return on_processes(fn, items, processes, label=label, quiet=quiet)
    return on_ray(fn, items, address=address, num_cpus=num_cpus, label=label, quiet=quiet)
