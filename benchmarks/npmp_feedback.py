"""How much of their LQR law's feedback do the primitives reproduce? (issue 13; docs/npmp.md, "A loss that weighs
what the law holds").

An LQR law labels a state x at time t with u*_t + K_t (x - x*_t) (agents/lqr.py): its planner run's command plus
its feedback. On a data file's stored rollouts, the primitives' command at each step (the encoder reading the clip's
reference, as in distillation) is set against the label, both less u*_t:

- ``r2``: 1 - sum (command - label)^2 / sum (label - u*_t)^2, the share of the law's feedback the primitives
  reproduce (1: all of it; 0: no better than replaying u*_t), over every action dimension, and per ``--bin`` frames
  of the chain;
- ``slope``: sum (command - u*_t)(label - u*_t) / sum (label - u*_t)^2, how large their feedback is along the
  law's (1: as large; below 1: they correct less than the law);
- with ``--action-weights`` (``python -m pipelines.npmp law-weights``) also ``r2_weighted``, each step's squares
  weighed by its law's Hessian (pipelines/npmp/weights.py);
- ``feedback_ms``: the law's feedback's mean square per action dimension, ``mse`` the primitives' plain error.

Windows are drawn as the distillation draws them (``--windows snippets``), the same for every primitives set.

    python benchmarks/npmp_feedback.py --data runs/s19/kept.h5 --primitives runs/s19/c_s1 data/primitives/npmp-clips
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.runs import fail, write_json  # noqa: E402


def feedback_share(model, dataset, batches: int, batch: int, length: int, seed: int, bin_frames: int) -> dict:
    """The numbers of the module docstring for one primitives set on ``dataset`` (an ``NPMPDataset`` with the
    model's look-ahead and, for ``r2_weighted``, action weights)."""
    commands = dataset.law_commands()
    sums: dict[str, float] = {"error": 0.0, "feedback": 0.0, "cross": 0.0, "error_w": 0.0, "feedback_w": 0.0,
                              "steps": 0.0}
    bins: dict[int, list[float]] = {}
    with torch.no_grad():
        for i in range(batches):
            generator = torch.Generator().manual_seed(seed + i)
            b = dataset.sample_bc(batch, length, generator, per_snippet=True)
            # the same draw again (same generator seed), for the windows' snippets and time indices
            w = dataset.bc.windows(batch, length, torch.Generator().manual_seed(seed + i), per_snippet=True)
            time = w.time[:, :length]
            nominal = commands.at(dataset.bc.owner[w.which], time)
            z, _ = model.encode(b.states, sample=False, targets=b.lookahead, context=b.context)
            command = model.decode(b.states[:, :length], z)[0].clamp(-1.0, 1.0)
            mask = b.mask[..., None]
            error, feedback = (command - b.actions) * mask, (b.actions - nominal) * mask
            sums["error"] += (error ** 2).sum().item()
            sums["feedback"] += (feedback ** 2).sum().item()
            sums["cross"] += ((command - nominal) * feedback).sum().item()
            sums["steps"] += b.mask.sum().item()
            if b.action_weights is not None:
                sums["error_w"] += torch.einsum("bta,btac,btc->", error, b.action_weights, error).item()
                sums["feedback_w"] += torch.einsum("bta,btac,btc->", feedback, b.action_weights, feedback).item()
            for start in range(0, int(time.max()) + 1, bin_frames):
                inside = ((time >= start) & (time < start + bin_frames)).float()[..., None]
                totals = bins.setdefault(start, [0.0, 0.0])
                totals[0] += ((error ** 2) * inside).sum().item()
                totals[1] += ((feedback ** 2) * inside).sum().item()
    if sums["feedback"] == 0:
        raise ValueError("the law's labels equal its run's commands on every step drawn: no feedback to compare with")
    dims = sums["steps"] * commands.values.shape[1]
    out = {"r2": 1 - sums["error"] / sums["feedback"], "slope": sums["cross"] / sums["feedback"],
           "feedback_ms": sums["feedback"] / dims, "mse": sums["error"] / dims,
           "r2_by_frames": {f"{start}-{start + bin_frames}": 1 - e / f for start, (e, f) in sorted(bins.items())
                            if f > 0}}
    if sums["feedback_w"] > 0:
        out["r2_weighted"] = 1 - sums["error_w"] / sums["feedback_w"]
    return {k: (float(f"{v:.4g}") if isinstance(v, float) else {b: round(x, 4) for b, x in v.items()})
            for k, v in out.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help="an LQR-law collection (or a relabelled one)")
    p.add_argument("--primitives", type=Path, nargs="+", required=True)
    p.add_argument("--snippets", nargs="+", help="default: the first primitives' clips held by the data")
    p.add_argument("--action-weights", type=Path, help="a law-weights file of --data: also r2_weighted")
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--length", type=int, default=30)
    p.add_argument("--bin", type=int, default=60, help="frames per bin of r2_by_frames")
    p.add_argument("--seed", type=int, default=500)
    p.add_argument("--results", type=Path, help="also write the numbers here (JSON)")
    args = p.parse_args(argv)

    from agents.config import ConfigError
    from pipelines.npmp.data import NPMPDataset, read_snippets
    from pipelines.npmp.weights import read_law_weights
    from priors.npmp import load_primitives

    if min(args.batches, args.batch, args.length, args.bin) < 1:
        fail("--batches, --batch, --length and --bin must be >= 1")
    try:
        loaded = [(path, *load_primitives(path)) for path in args.primitives]
        config = loaded[0][1].config
        if any(model.config.lookahead_source != config.lookahead_source or
               model.config.far_offsets != config.far_offsets or model.config.path_offsets != config.path_offsets
               for _, model, _ in loaded):
            fail("the primitives read the reference differently: rank sets with the same look-ahead together")
        available = read_snippets(args.data)
        snippets = args.snippets or [s for s in loaded[0][2].get("clips", []) if s in available]
        weights = read_law_weights(args.action_weights, args.data, snippets) if args.action_weights else None
        dataset = NPMPDataset(args.data, snippets, lookahead_source=config.lookahead_source,
                              path_offsets=config.path_offsets, far_offsets=config.far_offsets,
                              action_weights=weights)
        rows = {}
        for path, model, _ in loaded:
            rows[str(path)] = feedback_share(model.eval(), dataset, args.batches, args.batch, args.length,
                                             args.seed, args.bin)
            print(f"{path}: {rows[str(path)]}", flush=True)
    except (ConfigError, FileNotFoundError, ValueError) as e:
        fail(str(e))
    if args.results:
        write_json(args.results, {"command": " ".join(["python", *sys.argv]), "data": str(args.data),
                                  "snippets": snippets, "primitives": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
