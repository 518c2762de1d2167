"""Joining or starting a Ray cluster, shared by everything that spans processes or machines: the distributed actors
(agents/actors.py), the fan-out of independent runs (cluster/fanout.py) and the SNEP posterior server
(inference/ep/server.py). Imports nothing from the project, so every layer may use it."""
from __future__ import annotations

import logging
import os


class ClusterError(ValueError):
    """Ray cannot be reached or started; the message names the address or the setting to fix."""


def connect_ray(address: str | None, num_cpus: int | None = None) -> bool:
    """Join the Ray cluster at ``address`` (``auto``, ``ray://host:port``) or start a local one on ``num_cpus``;
    True if this call started (and so should shut down) Ray. One ClusterError when it cannot."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage-stats prompt or upload
    quiet = {"log_to_driver": False, "logging_level": logging.ERROR}
    if address:
        if num_cpus is not None:
            raise ClusterError("num_cpus sizes a local Ray cluster; a cluster at an address has its own CPUs")
        check_reachable(address)
        kwargs = {"address": address, **quiet}
    else:
        if num_cpus is not None and num_cpus < 1:
            raise ClusterError(f"num_cpus must be positive, got {num_cpus}")
        kwargs = {"num_cpus": num_cpus or os.cpu_count(), "include_dashboard": False, **quiet}
    try:
        ray.init(**kwargs)
    except (ConnectionError, ValueError, RuntimeError, TimeoutError) as e:
        raise ClusterError(f"cannot {'reach the Ray cluster at ' + address if address else 'start a local Ray cluster'}"
                          f" ({one_line(e)})") from None
    return True


def check_reachable(address: str, timeout: float = 3.0) -> None:
    """One ClusterError at once for a ``host:port`` / ``ray://host:port`` nobody answers at (Ray itself retries for
    minutes); ``auto`` is left to Ray, which fails fast when no local cluster runs."""
    import socket

    target = address.split("://", 1)[-1]
    if address == "auto" or ":" not in target:
        return
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except (OSError, ValueError) as e:
        raise ClusterError(f"cannot reach the Ray cluster at {address} ({one_line(e)})") from None


def one_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{error.__class__.__name__}: {lines[0] if lines else ''}".rstrip(": ")
