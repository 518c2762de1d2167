"""What the closed-loop encoder reads of a reference, and a reference bent at a chosen yaw rate (issue 13;
docs/npmp.md, "Steering on `humanoid`").

Primitives distilled with ``lookahead_source="reference"`` (priors/npmp/model.py) encode z_t from z_{t-1}, the
current state s_t and x_t: the reference's states r_{t+1..t+K} and, with ``path_offsets``, its path p_t
(``reference_path``). ``reference_input`` reads x_t from one reference; ``closed_loop_latent`` turns such a reader
into the encoder's latent step by step. ``bent_reference_input`` reads a straight walk as if it were bent at a
yaw rate chosen at every step, from the walk and its two arcs at a fixed rate (``envs.mocap.convert --curve``):
the bent walk's frames differ from the straight one's only in the root's turning, which is linear in the rate, so
the states ahead are interpolated toward the arc's and the path ahead is the straight walk's path bent from the
current frame on at the current rate. At 0 and at the arcs' rate it is exactly the walk's and the arc's input
(tests/test_npmp_pipeline.py). A departure from the seed, whose high level acts on the latent (eq 8.2): here a
high level may choose the reference, which the primitives were trained to follow.

References are ``(states [T+1, S], root [T+1, 3])`` tensors on the model's device (``envs.mocap.tracking
.reference_playback`` records them: the proprio states of the walker put on each frame, the root's floor pose).
"""
from __future__ import annotations

import math

import torch

from priors.npmp.model import reference_path

CONTROL_STEP_SECONDS = 0.03   # the CMU humanoid's control step: one reference frame per step


def reference_input(model, reference: torch.Tensor, root: torch.Tensor | None = None):
    """``t -> x_t``: what the encoder reads of the reference at step t: the reference states r_{t+1..t+K} (the last
    frame repeated past the clip's end), and with ``path_offsets`` the path p_t read from the reference root's poses
    ``root [T+1, 3]``."""
    K, last = model.config.lookahead, len(reference) - 1
    if model.config.path_offsets and (root is None or len(root) != len(reference)):
        raise ValueError(f"primitives with path_offsets {model.config.path_offsets} need the reference root's "
                         f"{len(reference)} poses, got {None if root is None else len(root)}")
    path = (reference_path(root.to(reference), model.config.path_offsets) if model.config.path_offsets
            else reference.new_zeros(len(reference), 0))

    def read(t: int) -> torch.Tensor:
        ahead = reference[[min(t + j, last) for j in range(1, K + 1)]]
        return torch.cat([ahead.flatten(), path[min(t, last)]])

    return read


def closed_loop_latent(model, read):
    """``(t, state) -> z_t``, the encoder's mean given z_{t-1}, the state and ``read(t)`` (``reference_input``;
    a steering controller may switch between references' inputs from step to step: the latent carries over)."""
    previous = [None]

    def latent(t: int, state: torch.Tensor) -> torch.Tensor:
        if previous[0] is None:
            previous[0] = state.new_zeros(model.config.latent_dim)
        z, _ = model.encode_step(previous[0], torch.cat([state, read(t)]))
        previous[0] = z
        return z

    return latent


def bent_reference_input(model, references: dict, arc_rate: float):
    """``(t, rate deg/s) -> x_t``: what the encoder reads of the straight walk bent at ``rate`` from frame t on
    (module docstring). ``references``: ``{"straight", "left", "right"}`` -> (states, root) of the walk and of its
    arcs at ``arc_rate`` deg/s (left: counter-clockwise); ``rate`` beyond ``arc_rate`` is extrapolated."""
    straight_states, straight_root = references["straight"]
    K, last, offsets = model.config.lookahead, len(straight_states) - 1, model.config.path_offsets
    if not offsets:
        raise ValueError("primitives without path_offsets do not read the path: bending it cannot steer them")
    ahead_frames = max(offsets)

    def read(t: int, rate: float) -> torch.Tensor:
        frames = [min(t + j, last) for j in range(1, K + 1)]
        arc_states = references["left" if rate > 0 else "right"][0]
        share = abs(rate) / arc_rate
        ahead = straight_states[frames] + share * (arc_states[frames] - straight_states[frames])
        index = torch.clamp(torch.arange(t, t + ahead_frames + 1, device=straight_root.device), max=last)
        root = straight_root[index]
        # past the clip's end its last frame repeats (as in the look-ahead): the bend stops there too
        turned = math.radians(rate) * CONTROL_STEP_SECONDS * (index - t).to(root.dtype)
        steps = root[1:, :2] - root[:-1, :2]
        cos, sin = torch.cos(turned[:-1]), torch.sin(turned[:-1])
        steps = torch.stack([cos * steps[:, 0] - sin * steps[:, 1], sin * steps[:, 0] + cos * steps[:, 1]], dim=-1)
        bent = torch.cat([root[:1, :2], root[:1, :2] + torch.cumsum(steps, dim=0)])
        local = torch.cat([bent, (root[:, 2] + turned)[:, None]], dim=-1)
        return torch.cat([ahead.flatten(), reference_path(local, offsets)[0]])

    return read
