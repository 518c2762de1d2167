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

import numpy as np

import torch

from priors.npmp.model import reference_context, reference_path

CONTROL_STEP_SECONDS = 0.03   # the CMU humanoid's control step: one reference frame per step


def reference_input(model, reference: torch.Tensor, root: torch.Tensor | None = None):
    """``t -> x_t``: what the encoder reads of the reference at step t: the reference states r_{t+1..t+K} (the last
    frame repeated past the clip's end), and with ``far_offsets`` and ``path_offsets`` the states further ahead and
    the path read from the reference root's poses ``root [T+1, 3]`` (``reference_context``)."""
    K, last = model.config.lookahead, len(reference) - 1
    context = reference_context(model.config, reference, root)

    def read(t: int) -> torch.Tensor:
        ahead = reference[[min(t + j, last) for j in range(1, K + 1)]]
        return torch.cat([ahead.flatten(), context[min(t, last)]])

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
    last, offsets = len(straight_states) - 1, model.config.path_offsets
    if not offsets:
        raise ValueError("primitives without path_offsets do not read the path: bending it cannot steer them")
    ahead_frames = max(offsets)

    def read(t: int, rate: float) -> torch.Tensor:
        frames = [min(t + j, last) for j in model.config.read_offsets]
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


# a clip whose heading changes more than this from its first frame to its last is a turn (``ClipGraph.skip_windup``);
# a looped walk drifts a few degrees
TURNING_CLIP_DEGREES = 45.0


class ClipGraph:
    """The clips primitives were taught, and where one may follow another: a motion graph (Kovar, Gleicher and
    Pighin 2002, "Motion graphs") over the encoder's own inputs (issue 13; docs/npmp.md, "A high level that chooses
    clips"). A departure from seed 000 §8.4, whose high level outputs z: here it chooses which clip the frozen
    primitives imitate next, and they imitate it as they imitate any clip they are shown.

    ``references``: clip id -> ``Reference`` (numpy; ``envs.mocap.tracking.reference_playback``). A clip is entered at
    the frame whose ``window`` frames best match the last ``window`` frames already chosen (mean squared difference of
    the proprio states, each dimension standardised over all the clips' frames). A clip can only be entered where at
    least ``min_segment`` frames and ``turn_share`` of its whole turn (root heading, start to end) lie ahead, so that
    a turning clip is entered before its turn, not after it. With ``skip_windup`` a turning clip (one whose heading
    changes more than ``TURNING_CLIP_DEGREES`` in all) is entered no earlier than its wind-up's end: the frame where
    its heading lies farthest against the turn (CMU 16_27's left turn first veers 13 degrees right over 15 frames;
    entered there after a left turn's start, the right turn makes two reversals within a second, docs/npmp.md). The
    standardisation depends on the set of clips: chains
    written for the planner (``pipelines.npmp chain``) match the high level's only when both graphs hold the same
    clips."""

    def __init__(self, references: dict, window: int = 3, min_segment: int = 20, turn_share: float = 0.8,
                 skip_windup: bool = False):
        if not references:
            raise ValueError("a clip graph needs at least one clip")
        if window < 1 or min_segment < window + 1 or not 0.0 <= turn_share <= 1.0:
            raise ValueError(f"need window >= 1, min_segment > window and turn_share in [0, 1], got {window}, "
                             f"{min_segment}, {turn_share}")
        self.references, self.window = dict(references), window
        frames = np.concatenate([np.asarray(r.states, np.float64) for r in self.references.values()])
        self._mean, self._scale = frames.mean(0), frames.std(0) + 1e-3
        self.entries = {}
        for clip, ref in self.references.items():
            if len(ref.states) < min_segment + window:
                raise ValueError(f"clip {clip} has {len(ref.states)} frames, fewer than min_segment + window = "
                                 f"{min_segment + window}")
            turn = np.unwrap(np.asarray(ref.root[:, 2], np.float64))
            ahead = np.abs(turn[-1] - turn)
            total = abs(turn[-1] - turn[0])
            last = len(ref.states) - min_segment - window
            allowed = [j for j in range(last + 1) if ahead[j + window] >= turn_share * total - 1e-9]
            if skip_windup and total > np.radians(TURNING_CLIP_DEGREES):
                windup_end = int(np.argmin(np.sign(turn[-1] - turn[0]) * (turn - turn[0])))
                allowed = [j for j in allowed if j + window >= windup_end]
            if not allowed:
                raise ValueError(f"clip {clip} has no entry left (min_segment {min_segment}, turn_share "
                                 f"{turn_share}, skip_windup {skip_windup})")
            self.entries[clip] = np.array(allowed)

    def standardise(self, states: np.ndarray) -> np.ndarray:
        return (np.asarray(states, np.float64) - self._mean) / self._scale

    def entry(self, recent: np.ndarray, clip: str) -> tuple[int, float]:
        """(the first frame of ``clip`` to follow ``recent``, the last ``window`` states chosen, and the match's
        distance): the frame after the best-matching window among the allowed entries."""
        if clip not in self.references:
            raise KeyError(f"no clip {clip!r} in the graph (it has {', '.join(self.references)})")
        states, recent = self.standardise(self.references[clip].states), self.standardise(recent[-self.window:])
        starts = self.entries[clip]
        windows = np.stack([states[j:j + self.window] for j in starts])
        distance = np.mean((windows - recent[None]) ** 2, axis=(1, 2))
        best = int(np.argmin(distance))
        return int(starts[best]) + self.window, float(distance[best])


class ReferenceChain:
    """The reference a clip graph's walker follows, grown a segment at a time: frame t of the chain is what the
    walker should be at on control step t. It starts with ``start_frames`` of ``start_clip`` (the episode starts on
    that clip's first frame); ``append(clip)`` continues it with ``clip`` from its best entry to its end, the root's
    poses moved so that the path goes on from where the chain ends. ``read(t)`` is what the encoder reads at step t
    (``reference_input``'s look-ahead; primitives with ``path_offsets`` read the chain's path).

    ``blend`` > 0 fades each join in over that many frames, as motion graphs make their transitions (Kovar et al.
    2002, §3.2): the chain's last ``blend`` frames are blended with the new clip's frames just before its entry
    (those the match aligned with them, placed on the new segment's path), the clip's share rising smoothly from 0
    to 1. A cut makes the whole body jump between two frames; the blend spreads the jump over ``blend`` steps. The
    blended frames are the chain's last ones: a walker following the chain must not have reached them yet."""

    def __init__(self, model, graph: ClipGraph, start_clip: str, start_frames: int, blend: int = 0):
        if start_clip not in graph.references:
            raise KeyError(f"no clip {start_clip!r} in the graph (it has {', '.join(graph.references)})")
        start = graph.references[start_clip]
        if not graph.window <= start_frames <= len(start.states):
            raise ValueError(f"start_frames must lie in [{graph.window}, {len(start.states)}], got {start_frames}")
        if blend < 0:
            raise ValueError(f"blend must be >= 0 frames, got {blend}")
        self.model, self.graph, self.blend = model, graph, int(blend)
        self.device = next(model.parameters()).device if model is not None else None
        self._states = np.asarray(start.states[:start_frames], np.float32)
        self._root = np.asarray(start.root[:start_frames], np.float64)
        self.segments = [(start_clip, 0, start_frames)]   # (clip, first frame, frames) of each segment

    def __len__(self) -> int:
        return len(self._states)

    def append(self, clip: str, frames: int | None = None) -> tuple[int, float]:
        """Continue with ``clip`` (``ClipGraph.entry``) to its end, or for at most ``frames`` frames; returns
        (entry frame, match distance)."""
        j, distance = self.graph.entry(self._states, clip)
        stop = len(self.graph.references[clip].states) if frames is None else \
            min(len(self.graph.references[clip].states), j + int(frames))
        self.extend(clip, j, stop - j)
        return j, distance

    def extend(self, clip: str, first: int, frames: int) -> None:
        """Continue with ``frames`` frames of ``clip`` from frame ``first`` (what ``append`` does once it has chosen
        the entry; ``segments`` replayed through it rebuild a chain)."""
        ref = self.graph.references[clip]
        stop = first + frames
        if not 0 <= first < stop <= len(ref.states):
            raise ValueError(f"clip {clip} has frames [0, {len(ref.states)}), not [{first}, {stop})")
        root = np.asarray(ref.root[first:stop], np.float64)
        # the new segment's first pose goes where the chain's next pose would have been (its last step repeated)
        last = self._root[-1]
        before = self._root[-2] if len(self._root) > 1 else last
        turn = np.remainder(last[2] - before[2] + np.pi, 2 * np.pi) - np.pi
        anchor = np.array([*(2 * last[:2] - before[:2]), last[2] + turn])
        blend = self._blend_frames(first, len(self._states))
        if blend:
            self._blend_tail(ref, first, blend, anchor)
        self._root = np.concatenate([self._root, move_poses(root, root[0], anchor)])
        self._states = np.concatenate([self._states, np.asarray(ref.states[first:stop], np.float32)])
        self.segments.append((clip, first, frames))

    def _blend_frames(self, first: int, frames_before: int) -> int:
        """Frames a join into a clip entered at ``first`` is blended over: ``blend``, or fewer where the clip or the
        chain so far is shorter."""
        return min(self.blend, first, frames_before)

    def blend_frames(self) -> list[int]:
        """Frames each segment's join was blended over (0 for the first segment)."""
        before = np.cumsum([frames for _, _, frames in self.segments])
        return [0] + [self._blend_frames(first, int(before[i])) for i, (_, first, _) in enumerate(self.segments[1:])]

    def _blend_tail(self, ref, first: int, frames: int, anchor: np.ndarray) -> None:
        """Blend the chain's last ``frames`` frames toward ``ref``'s frames [first - frames, first), moved as the
        segment entered at ``first`` is (class docstring)."""
        share = blend_weights(frames)
        clip_root = move_poses(np.asarray(ref.root[first - frames:first + 1], np.float64),
                               np.asarray(ref.root[first], np.float64), anchor)[:-1]
        clip_states = np.asarray(ref.states[first - frames:first], np.float32)
        states, root = self._states.copy(), self._root.copy()
        tail = slice(len(states) - frames, len(states))
        states[tail] += share[:, None].astype(np.float32) * (clip_states - states[tail])
        turn = np.remainder(clip_root[:, 2] - root[tail, 2] + np.pi, 2 * np.pi) - np.pi
        root[tail, :2] += share[:, None] * (clip_root[:, :2] - root[tail, :2])
        root[tail, 2] += share * turn
        self._states, self._root = states, root

    @classmethod
    def from_segments(cls, model, graph: ClipGraph, segments, blend: int = 0) -> "ReferenceChain":
        """The chain whose ``segments`` (clip, first frame, frames) these are, its joins blended over ``blend``
        frames."""
        (start, first, frames), *rest = segments
        if first != 0:
            raise ValueError(f"a chain starts on its first clip's first frame, not frame {first}")
        chain = cls(model, graph, start, frames, blend)
        for clip, first, frames in rest:
            chain.extend(clip, int(first), int(frames))
        return chain

    def copy(self) -> "ReferenceChain":
        """An independent chain (``extend`` replaces the arrays, never writes into them: only the list is copied)."""
        other = object.__new__(ReferenceChain)
        other.__dict__.update(self.__dict__)
        other.segments = list(self.segments)
        return other

    def root_poses(self) -> np.ndarray:
        """The chain's root floor poses [len, 3] (x, y, heading) in the chain's own frame."""
        return self._root

    def read(self, t: int) -> torch.Tensor:
        config, last = self.model.config, len(self) - 1
        ahead = torch.as_tensor(self._states[[min(t + j, last) for j in config.read_offsets]], device=self.device)
        if not config.path_offsets:
            return ahead.flatten()
        index = [min(t + j, last) for j in range(max(config.path_offsets) + 1)]
        local = torch.as_tensor(self._root[index], dtype=torch.float32, device=self.device)
        return torch.cat([ahead.flatten(), reference_path(local, config.path_offsets)[0]])


def blend_weights(frames: int) -> np.ndarray:
    """The new clip's share over a blend of ``frames`` frames: Kovar et al.'s smooth ease, 0 < share < 1, rising."""
    x = np.arange(1, frames + 1, dtype=np.float64) / (frames + 1)
    return 3 * x ** 2 - 2 * x ** 3


def move_poses(poses: np.ndarray, source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Floor poses [N, 3] (x, y, heading) moved rigidly so that the pose ``source`` lands on ``target``."""
    turn = target[2] - source[2]
    cos, sin = np.cos(turn), np.sin(turn)
    dx, dy = poses[:, 0] - source[0], poses[:, 1] - source[1]
    return np.stack([target[0] + cos * dx - sin * dy, target[1] + sin * dx + cos * dy, poses[:, 2] + turn], axis=-1)
