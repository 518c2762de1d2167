"""One process per run directory: an advisory lock held for the life of the process that writes the run.

Two trainers on one run directory would delete each other's half-written checkpoints, flip ``latest`` between two
diverging runs and log duplicate steps. ``RunLock`` takes an exclusive ``flock`` on ``<run_dir>/.lock``; the kernel
drops it when the holder exits in any way (SIGKILL included), so a lock left by a dead process is simply taken over
-- there is no stale-lock guessing. The holder's pid, host and start time are written into the file for the message
the next process shows.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

LOCK_NAME = ".lock"


class RunDirectoryBusy(RuntimeError):
    """Another live process holds the run directory's lock; the message names it."""


class RunLock:
    """Exclusive lock on a run directory (created if missing). ``acquire()`` raises ``RunDirectoryBusy`` at once
    instead of waiting; ``release()`` (or process exit) frees it. A directory that its writer replaces as a whole
    (a primitives directory, priors/io.py ``save_module``) is locked through ``lock_file`` beside it instead."""

    def __init__(self, run_dir: str | Path, lock_file: str | Path | None = None):
        self.run_dir = Path(run_dir)
        self.path = Path(lock_file) if lock_file is not None else self.run_dir / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> "RunLock":
        if self._fd is not None:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(fd)
            os.close(fd)
            raise RunDirectoryBusy(f"{self.run_dir} is in use by another process ({holder}); wait for it to "
                                   "finish or stop it, or use another directory") from None
        except OSError as e:   # a file system without locks: say so rather than run unprotected silently
            os.close(fd)
            raise RunDirectoryBusy(f"cannot lock {self.path} ({e.strerror})") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _describe(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode())
        return f"pid {int(holder['pid'])} on {holder['host']}, since {holder['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "its lock file is unreadable"
