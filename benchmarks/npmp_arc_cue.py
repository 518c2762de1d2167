"""Do the primitives act on the arc they are shown? (issue 13; docs/npmp.md, "Eight looped arcs").

A looped walk bent into an arc (``envs.mocap.convert --curve``) differs from the straight walk, as the encoder reads
it (``evaluate.reference_states``: the walker put on each frame), almost only in its yaw rate: the joint angles are
the same and only the root turns. Primitives with ``path_offsets`` (``distill --path-offsets``) also read the
reference root's path ahead, where the bend shows as a heading change. Primitives that turn on command must carry
that cue from the reference through the latent to their actions. This measures whether they do, at the teacher's own states: along the noise-free run of
each arc's LQR law (the ``nominal`` trajectory stored in a data file collected with ``--expert-policy lqr``) the
decoder acts with the closed-loop latent of three references: the arc's own, the straight walk's and the mirrored
arc's (bent the other way). Reported per arc and primitives:
- ``label_mse``: the mean square error per action dimension against the law's labels, for each reference;
- ``own_vs_mirror``: the mean square difference per action dimension between the actions with the arc's own
  reference and with the mirrored one. Near 0: the actions do not depend on which way the arc bends (the cue is
  dropped), whatever the fit.
- ``reference_cue``: the largest shift, in units of the straight walk's spread, of one reference feature's mean
  between the arc and the straight walk, and which feature (what the encoder has to go on).

    python benchmarks/npmp_arc_cue.py --mocap runs/npmp/loops/mocap15.h5 --law runs/npmp/arcs/timed8.h5 \\
        --primitives runs/npmp/arcs/mix_d0 --arcs 07_01-0-loop10-left15 08_01-0-loop10-right15

Results are kept per primitives and arc, each row naming its law: a rerun measures only what the file lacks (or
what it measured against another law).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.runs import fail, resumed_results, save_results  # noqa: E402

SIDES = ("left", "right")


def arc_parts(arc: str) -> tuple[str, str]:
    """(straight walk, mirrored arc) of ``<walk>-<left|right><deg/s>`` (ValueError for a snippet that is no arc)."""
    walk, _, bend = arc.rpartition("-")
    side = next((s for s in SIDES if bend.startswith(s) and bend[len(s):].isdigit()), None)
    if not walk or side is None:
        raise ValueError(f"{arc} is not an arc (<walk>-left<deg/s> or <walk>-right<deg/s>, docs/mocap.md)")
    other = SIDES[1 - SIDES.index(side)]
    return walk, f"{walk}-{other}{bend[len(side):]}"


def reference_cue(arc_reference: np.ndarray, straight_reference: np.ndarray) -> dict:
    """The reference feature whose mean moves most between the straight walk and the arc, in straight-walk stds."""
    n = min(len(arc_reference), len(straight_reference))
    shift = (arc_reference[:n] - straight_reference[:n]).mean(0) / (straight_reference[:n].std(0) + 1e-6)
    feature = int(np.abs(shift).argmax())
    return {"feature": feature, "shift_in_stds": round(float(shift[feature]), 3)}


def measure(model, states, labels, references: dict) -> dict:
    """Decode along ``states`` with each reference's closed-loop latent and compare (module docstring)."""
    import torch

    from pipelines.npmp.evaluate import reference_encoder

    actions = {}
    for name, reference in references.items():
        latent = reference_encoder(model, torch.as_tensor(reference.states), torch.as_tensor(reference.root))
        with torch.no_grad():
            actions[name] = torch.stack([model.decode(s, latent(t, s))[0].clamp(-1.0, 1.0)
                                         for t, s in enumerate(states)])
    return {"label_mse": {name: round(float(((a - labels) ** 2).mean()), 5) for name, a in actions.items()},
            "own_vs_mirror": round(float(((actions["own"] - actions["mirror"]) ** 2).mean()), 6)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mocap", type=Path, required=True, help="the mocap file with the looped arcs (docs/mocap.md)")
    p.add_argument("--law", type=Path, required=True, help="a data file collected with --expert-policy lqr on the arcs")
    p.add_argument("--primitives", type=Path, nargs="+", required=True)
    p.add_argument("--arcs", nargs="+", required=True)
    p.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "npmp_arc_cue.json")
    args = p.parse_args(argv)

    import torch

    from envs import EnvError
    from pipelines.npmp.data import ConfigError, read_results
    from pipelines.npmp.evaluate import reference_playback
    from priors.npmp import ModuleFileError, load_primitives

    torch.set_num_threads(1)
    for path in (args.law, args.mocap):
        if not path.is_file():
            fail(f"no such file: {path}")
    try:
        parts = {arc: arc_parts(arc) for arc in args.arcs}
        collected = {r["snippet"]: r for r in read_results(args.law)[0]}
        models = {path: load_primitives(path)[0] for path in args.primitives}
    except (ValueError, ConfigError, ModuleFileError) as e:
        fail(str(e).splitlines()[0])
    missing = [arc for arc in args.arcs if arc not in collected]
    if missing:
        fail(f"{args.law} holds no law for {', '.join(missing)} (it has {', '.join(sorted(collected))})")
    law = str(args.law)
    results = resumed_results(args.results, Path(__file__).name, argv, mocap=str(args.mocap))
    results.setdefault("primitives", {})
    for arc, (walk, mirror) in parts.items():
        try:
            references = {name: reference_playback(snippet, ref_path=str(args.mocap))
                          for name, snippet in (("own", arc), ("straight", walk), ("mirror", mirror))}
        except (EnvError, ConfigError, ValueError, KeyError) as e:
            fail(f"{arc}: {str(e).splitlines()[0]}")
        nominal = collected[arc]["nominal"]
        steps = int(nominal["lengths"][0])
        states = torch.as_tensor(nominal["states"][:steps])
        labels = torch.as_tensor(nominal["mean_actions"][:steps])
        cue = reference_cue(references["own"].states, references["straight"].states)
        for path, model in models.items():
            rows = results["primitives"].setdefault(str(path), {})
            if rows.get(arc, {}).get("law") == law:   # measured against this law before
                continue
            rows[arc] = {"law": law, "steps": steps, "reference_cue": cue, **measure(model, states, labels, references)}
            save_results(args.results, results)
            print(f"{path}: {arc}: label mse {rows[arc]['label_mse']}, own vs mirror {rows[arc]['own_vs_mirror']}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
