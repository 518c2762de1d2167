"""What a student's command error costs its teacher's run: the LQR law's Hessians as weights of the distillation's
action error (issue 13; docs/npmp.md, "A loss that weighs what the law holds").

Why. Students distilled from the LQR laws (agents/lqr.py) fit every actuator's command alike (the decoder's
Gaussian log-likelihood with a fixed std, eq 8.3, is a plain squared error), yet they let the body's height, speed
and tilt drift 3-5 times as far from their teachers' run as the laws' own rollouts do, their joint angles only 1.2-2
times (docs/npmp.md, "A committee of students, and what they let drift"). The law's Riccati recursion says what an
error costs: a command off the law's by du at step t raises the quadratic cost-to-go by du' H_t du, H_t = R + B_t'
P_{t+1} B_t (``agents.lqr.riccati``). On the kept chains H_t's eigenvalues run from 1 (R) to a median largest of
about 27 (both hips' flexion with a knee; by actuator the arms weigh as much as the hips, since the law's cost weighs
every joint angle), with rare steps of 10^3-10^6 where the finite differences straddle a foot's contact.

What. W_t = H_t scaled to a mean eigenvalue of 1 (so the loss keeps its scale, and what a step weighs against
another is left to the data), its eigenvalues clamped to [``floor``, ``cap``] (the contact steps' outliers do not
take over a batch) and scaled again: ``action_weights``. The distillation's log-likelihood is then that of
N(mean, std^2 W_t^-1): -0.5 e' W_t e / std^2 + 0.5 log det W_t + const for e the action error
(``priors.npmp.model.NPMP.loss``; W = I is the plain loss; the normaliser does not change the gradients). A departure
from seed 000, whose eq 8.3 weighs every action dimension alike; a quadratic version of AggreVaTe's cost-to-go
weighting (Ross and Bagnell 2014) with the law's own cost.

Each step of the data is weighed with its chain's W_t at its time index (the DAgger episodes too: the law labels
them at that time). The weights live in a file of their own beside the data (``write_law_weights``), checked
against the data's planner runs and laws when read (``read_law_weights``)::

    /            attrs: format="probctl-npmp-law-weights", version, data (the data file), floor, cap
    /<snippet>   [T, A, A] float32: W_t; attrs: law_sha256 (``law_digest``: the planner run's commands and the
                 law's settings it was computed on)
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from agents.config import ConfigError
from pipelines.npmp.data import atomic_h5_file

FORMAT, VERSION = "probctl-npmp-law-weights", 2   # 2: the digest covers the law's settings
FLOOR, CAP = 0.1, 10.0


def action_weights(hessians: np.ndarray, floor: float = FLOOR, cap: float = CAP) -> np.ndarray:
    """W [T, A, A] from the law's Hessians H [T, A, A] (module docstring): each H_t scaled to a mean eigenvalue of
    1, its eigenvalues clamped to [floor, cap], scaled again to a mean eigenvalue of 1."""
    if not 0.0 < floor <= 1.0 <= cap:
        raise ConfigError(f"need 0 < floor <= 1 <= cap, got floor {floor}, cap {cap}")
    values, vectors = np.linalg.eigh(0.5 * (hessians + np.swapaxes(hessians, 1, 2)))
    if not np.isfinite(values).all() or (values <= 0).any():
        raise ConfigError("the law's Hessians are not positive definite (its linearisation diverged)")
    values = np.clip(values / values.mean(-1, keepdims=True), floor, cap)
    values /= values.mean(-1, keepdims=True)
    return np.einsum("tij,tj,tkj->tik", vectors, values, vectors)


def law_digest(commands: np.ndarray, law: dict) -> str:
    """What the weights were computed on: the planner run's commands and the law's settings (Q, R, ...)."""
    digest = hashlib.sha256(np.ascontiguousarray(commands, np.float64).tobytes())
    digest.update(json.dumps(law, sort_keys=True).encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class LawWeightsJob:
    """One snippet's weights: the LQR law of its saved planner run in ``data``, rebuilt as the relabelling does."""
    snippet: str
    data: str
    floor: float = FLOOR
    cap: float = CAP


def run_law_weights_job(job: LawWeightsJob) -> dict:
    """{"snippet", "weights" [T, A, A], "digest"} of one snippet (``LawWeightsJob``)."""
    from pipelines.npmp.data import planner_expert, read_meta, saved_run, snippet_law, snippet_mocap

    found, meta, _ = saved_run([job.data], job.snippet)
    law = None if found is None else snippet_law(found["attrs"], meta)
    if law is None:
        raise ConfigError(f"{job.snippet} in {job.data} has no LQR law's run (collect --expert-policy lqr)")
    if law.get("periodic"):
        raise ConfigError(f"{job.snippet}'s law is periodic: its gains are the cycle's, weights are for "
                          "time-indexed laws only")
    expert = planner_expert(job.snippet, read_meta(job.data).get("planner"), law, found["plan"],
                            snippet_mocap(found["attrs"]))
    expert.make_env(0).close()   # builds the law around the saved run: no planning
    return {"snippet": job.snippet, "weights": action_weights(expert.tracker.action_hessians, job.floor, job.cap),
            "digest": law_digest(found["plan"]["commands"], law)}


def write_law_weights(path: Path | str, data: Path | str, results: list[dict], floor: float = FLOOR,
                      cap: float = CAP) -> Path:
    """The weights file (module docstring), written atomically."""
    path = Path(path)
    with atomic_h5_file(path) as f:
        f.attrs.update(format=FORMAT, version=VERSION, data=str(data), floor=floor, cap=cap)
        for result in results:
            dataset = f.create_dataset(result["snippet"], data=np.asarray(result["weights"], np.float32),
                                       compression="gzip", shuffle=True)
            dataset.attrs["law_sha256"] = result["digest"]
    return path


def read_law_weights(path: Path | str, data: Path | str, snippets: list[str]) -> dict[str, np.ndarray]:
    """snippet -> W [T, A, A] for ``snippets`` of the data file ``data``; ConfigError where the file is not a
    weights file, lacks a snippet, or was computed on another planner run or law than the data's."""
    from pipelines.npmp.data import read_laws

    path = Path(path)
    laws = read_laws(data)
    absent = [s for s in snippets if s not in laws]
    if absent:
        raise ConfigError(f"snippets {absent} are not in {data}")
    try:
        with h5py.File(path, "r") as f, h5py.File(data, "r") as d:
            if f.attrs.get("format") != FORMAT or f.attrs.get("version") != VERSION:
                raise ConfigError(f"{path} is not a {FORMAT} v{VERSION} file (python -m pipelines.npmp law-weights)")
            missing = [s for s in snippets if s not in f]
            if missing:
                raise ConfigError(f"{path} has no weights for {missing}")
            out = {}
            for snippet in snippets:
                commands = d[snippet]["plan"]["commands"][()] if "plan" in d[snippet] else None
                if commands is None or laws[snippet] is None or \
                        law_digest(commands, laws[snippet]) != f[snippet].attrs["law_sha256"]:
                    raise ConfigError(f"{path}'s weights of {snippet} were computed on another planner run or law "
                                      f"than {data}'s: compute them again from this data")
                out[snippet] = f[snippet][()]
                if len(out[snippet]) != len(commands):
                    raise ConfigError(f"{path}'s weights of {snippet} have {len(out[snippet])} steps, its run "
                                      f"{len(commands)}")
            return out
    except (OSError, KeyError) as e:
        raise ConfigError(f"{path} is missing or corrupt ({e.__class__.__name__}: {e})") from None
