"""Chains of clips written as new mocap snippets (issue 13; docs/npmp.md, "A high level that chooses clips").

A high level that chooses which clip the primitives imitate next (``priors.reuse.ClipChoiceActionEnv``) shows them
chains: a walk, then a turn entered where it best matches the walk, then the walk again... Primitives taught only
the clips themselves fall at those joins. This writes such chains as snippets of a mocap file, so that the planner
can track them and its laws teach the joins (``collect``, ``relabel``): each chain is built exactly as the high level
builds it (``priors.npmp.reference.ReferenceChain``: the same entries, the same roots), and its qpos is the clips'
own frames played one after the other, with their own velocities (``envs.mocap.convert.chain_motion``).

    python -m pipelines.npmp chain --mocap runs/graph/walks26.h5 data/mocap/cmu_turns.h5 \\
        --chain A=07_01-0-loop26:90,16_27-0,07_01-0-loop26:60,16_27-0-mirror --out runs/graph/chains.h5

A chain is ``NAME=CLIP:FRAMES,CLIP[:FRAMES],...``: the first clip's first FRAMES frames, then each clip from its
best entry to its end or for at most FRAMES frames. The graph holds the clips the chains name; its entries are the
high level's when that chooses from the same clips (``ClipGraph``: the match is standardised over its clips).
"""
from __future__ import annotations

from pathlib import Path


def parse_chain(spec: str) -> tuple[str, list[tuple[str, int | None]]]:
    """``NAME=CLIP:FRAMES,CLIP[:FRAMES],...`` -> (name, [(clip, frames or None), ...]); ValueError if malformed."""
    name, _, body = spec.partition("=")
    items = []
    for item in body.split(",") if body else []:
        clip, _, frames = item.partition(":")
        if not clip or (frames and not frames.isdigit()):
            raise ValueError(f"chain {spec!r}: each item is CLIP or CLIP:FRAMES (a whole number), got {item!r}")
        items.append((clip, int(frames) if frames else None))
    if not name or "/" in name or len(items) < 2 or items[0][1] is None:
        raise ValueError(f"a chain is NAME=CLIP:FRAMES,CLIP[:FRAMES],... (two clips or more, the first with its "
                         f"frames), got {spec!r}")
    return name, items


def chain_joins(mocap: Path) -> dict[str, list[int]]:
    """chain -> the frames where each of its clips after the first begins (``write_chains``' segments, kept in the
    file's ``chain_segments``); the last ``chain_blend`` frames before each join fade into the next clip. Empty for a
    mocap file of other snippets."""
    import h5py

    with h5py.File(mocap, "r") as f:
        rows = [r.decode() if isinstance(r, bytes) else str(r) for r in f.attrs.get("chain_segments", [])]
    joins = {}
    for row in rows:
        name, *segments = row.split()   # "NAME CLIP@FIRST+FRAMES ...", as write_chains writes it
        starts = [0]
        for segment in segments:
            starts.append(starts[-1] + int(segment.rpartition("+")[2]))
        joins[name] = starts[1:-1]
    return joins


def write_chains(mocap: list[Path], specs: list[str], out: Path,
                 blend: int = 0) -> dict[str, list[tuple[str, int, int]]]:
    """Write each chain of ``specs`` (module docstring) as a snippet of ``out``, its joins blended over ``blend``
    frames (``ReferenceChain``); returns name -> its segments (clip, first frame, frames)."""
    from envs.mocap.convert import CONTROL_TIMESTEP, Converter, chain_motion, snippet_qpos, write_hdf5
    from agents.npmp import clip_graph
    from priors.npmp.reference import ReferenceChain, blend_weights

    chains = dict(parse_chain(spec) for spec in specs)
    if len(chains) != len(specs):
        raise ValueError("chain names must differ")
    graph, where = clip_graph(sorted({clip for items in chains.values() for clip, _ in items}), mocap)
    qpos = {clip: snippet_qpos(where[clip], clip) for clip in where}
    converter, snippets, segments, rows = Converter(), {}, {}, []
    qvel = {clip: converter.kinematics.differentiate(q, CONTROL_TIMESTEP) for clip, q in qpos.items()}
    for name, items in chains.items():
        chain = ReferenceChain(None, graph, items[0][0], items[0][1], blend)
        for clip, frames in items[1:]:
            chain.append(clip, frames)
        # each join blended over the frames the chain blends it over, with its clip's frames before the entry
        leads = chain.blend_frames()
        spans = [(clip, first - lead, first + frames) for (clip, first, frames), lead in zip(chain.segments, leads)]
        # a snippet's playback ends a few frames before its last (the tracking task's min_steps): the last clip's
        # own frames beyond the chain's end are kept, so that the snippet plays back to the chain's last frame
        clip, first, frames = chain.segments[-1]
        spans[-1] = (clip, first - leads[-1], first + frames + len(qpos[clip]) - len(graph.references[clip].states))
        motion = chain_motion([qpos[c][a:b] for c, a, b in spans], [qvel[c][a:b] for c, a, b in spans],
                              [blend_weights(lead) for lead in leads])
        snippets[name] = converter.features(*motion)
        segments[name] = chain.segments
        rows.append(" ".join([name, *(f"{clip}@{first}+{frames}" for clip, first, frames in chain.segments)]))
        print(f"{name}: {len(chain)} frames, " + ", ".join(f"{c} [{a}, {a + n})" for c, a, n in chain.segments),
              flush=True)
    write_hdf5(out, snippets, CONTROL_TIMESTEP, dict(
        source="chains of clips of " + ", ".join(str(p) for p in mocap) + " (pipelines/npmp/chains.py)",
        walker="CMUHumanoidPositionControlledV2020", control_timestep=CONTROL_TIMESTEP,
        body_scale=converter.body_scale, chain_segments=[r.encode() for r in rows], chain_blend=blend))
    return segments
