"""Perturbed, fully deterministic rollouts of a MuJoCo environment: the input model of a robustness estimate.

A rare-event estimate of how often a controller fails (seed 003 Ch 5, ``inference.rare_events``) needs the failure
score s(x) to be a deterministic function of one vector x with a known density, so that Metropolis-Hastings on x is
valid (seed 003 §6, "every source of environment randomness must live inside x"). Here x ~ N(0, I_D) holds, in
order:

- the initial-state perturbation: ``init_noise`` * x added to every hinge and slide joint angle (qpos) and to every
  degree of freedom's velocity (qvel; for free joints only their velocities, which keeps quaternions valid);
- the pushes: at every ``push_every`` seconds (not at 0) a force ``push_scale * m g * x_k`` (x_k in R^3: world x,
  y, z, m the total mass) on the root body (the first body under the world, e.g. the torso) for ``push_duration``
  seconds.

Everything else is pinned: every rollout starts from one captured simulator state (``DMEnv.get_state`` after a reset
with a fixed seed: positions, velocities, the task's random streams), so the task draws the same numbers in every
rollout, and the policy acts deterministically (its mode).
"""
from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from envs.dmc import DMEnv

__all__ = ["PerturbationModel", "dm_env_of"]


def dm_env_of(env) -> DMEnv:
    """The MuJoCo environment inside Gymnasium wrappers, or a ValueError naming what it is."""
    inner = env
    while not isinstance(inner, DMEnv) and hasattr(inner, "env"):
        inner = inner.env
    if not isinstance(inner, DMEnv):
        raise ValueError(f"robustness needs a dm_control (MuJoCo) environment; {type(inner).__name__} is not one")
    return inner


@dataclass(frozen=True)
class PerturbationModel:
    init_noise: float = 0.05       # std of joint angles (rad or m) and velocities (rad/s or m/s)
    push_every: float = 1.0        # seconds between pushes
    push_duration: float = 0.1     # seconds each push lasts
    push_scale: float = 0.5        # std of each force component, as a fraction of the body's weight
    horizon: float = 5.0           # seconds per rollout

    def __post_init__(self):
        for name in ("init_noise", "push_scale"):
            if not np.isfinite(getattr(self, name)) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {getattr(self, name)}")
        for name in ("push_every", "push_duration", "horizon"):
            if not np.isfinite(getattr(self, name)) or getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a finite number > 0 (seconds), got {getattr(self, name)}")
        if self.push_duration > self.push_every:
            raise ValueError(f"push_duration ({self.push_duration} s) must not exceed push_every "
                             f"({self.push_every} s): pushes would overlap")

    # -- layout of x for one environment ------------------------------------------------------------------------
    def layout(self, env: DMEnv, control_dt: float) -> dict:
        """Steps, push schedule and the slices of x for ``env`` (``control_dt``: seconds per agent step)."""
        model = env.physics.model
        joint_qpos = []
        for j in range(model.njnt):
            if int(model.jnt_type[j]) in (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)):
                joint_qpos.append(int(model.jnt_qposadr[j]))
        steps = max(1, int(round(self.horizon / control_dt)))
        every = max(1, int(round(self.push_every / control_dt)))
        duration = max(1, int(round(self.push_duration / control_dt)))
        push_starts = list(range(every, steps, every))
        n_q, n_v, n_f = len(joint_qpos), int(model.nv), 3 * len(push_starts)
        return {"steps": steps, "push_starts": push_starts, "push_steps": duration, "qpos_index": joint_qpos,
                "slices": {"qpos": slice(0, n_q), "qvel": slice(n_q, n_q + n_v),
                           "pushes": slice(n_q + n_v, n_q + n_v + n_f)},
                "dim": n_q + n_v + n_f, "root_body": 1,
                "weight": float(np.sum(model.body_mass) * np.linalg.norm(model.opt.gravity))}

    def apply_initial(self, env: DMEnv, layout: dict, x: np.ndarray) -> None:
        data, physics = env.physics.data, env.physics
        data.qpos[layout["qpos_index"]] += self.init_noise * x[layout["slices"]["qpos"]]
        data.qvel[:] += self.init_noise * x[layout["slices"]["qvel"]]
        physics.forward()

    def force_at(self, layout: dict, x: np.ndarray, step: int) -> np.ndarray | None:
        """The push acting during agent step ``step`` (world frame, newtons), or None."""
        starts = layout["push_starts"]
        if not starts or step < starts[0]:
            return None
        # pushes start every starts[0] steps and last no longer than that (``__post_init__``): at most one acts
        k = min(step // starts[0] - 1, len(starts) - 1)
        if step >= starts[k] + layout["push_steps"]:
            return None
        return self.push_scale * layout["weight"] * x[layout["slices"]["pushes"]][3 * k:3 * k + 3]

    def set_force(self, env: DMEnv, layout: dict, force: np.ndarray | None) -> None:
        applied = env.physics.data.xfrc_applied
        applied[layout["root_body"]] = 0.0
        if force is not None:
            applied[layout["root_body"], :3] = force
