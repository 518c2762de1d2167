"""The walks-and-arcs table of docs/npmp.md, from the results files (issue 13; docs/npmp.md, "Walks and arcs
together, with the path").

Reads what ``npmp_noise.py`` measured (steps upright, turn at every whole second) and, if given, what
``npmp_arc_cue.py`` measured (own vs mirrored reference), and prints one markdown row per controller that was
measured on every ``--snippets`` at noise-free and one noisy level:
- per snippet: steps upright noise-free / median over the noisy episodes (of the snippet's length);
- how many episodes reached the snippet's end, noise-free and noisy;
- the cue: the smallest and largest ``own_vs_mirror`` over the arcs (any law);
- per arc whose straight walk is among the snippets: its turn at ``--turn-at`` seconds minus the straight walk's
  (noise-free / mean of the noisy episodes still upright then; – where either walk's episodes all fell before), and
  a last line with the reference's (the arc's bend, the same for every controller).

    python benchmarks/npmp_walk_table.py --noise-results benchmarks/results/npmp_noise_walk4.json \\
        --cue-results benchmarks/results/npmp_arc_cue.json --snippets 07_01-0-loop10 07_01-0-loop10-right15

It measures nothing: rerun the benchmarks to add controllers.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.npmp_arc_cue import arc_parts  # noqa: E402
from benchmarks.runs import fail  # noqa: E402


BEND = re.compile(r"(left|right)[0-9.]+(?:from([0-9.]+)to([0-9.]+))?$")


def short_name(snippet: str) -> str:
    """``08_02-0-loop10-left15`` -> ``08_02 left`` (``-left15from3to7`` -> ``left 3-7 s``): the clip and the bend,
    what tells the columns apart."""
    clip, bend = snippet.split("-", 1)[0], BEND.fullmatch(snippet.rsplit("-", 1)[1])
    if bend is None:
        return clip
    return f"{clip} {bend.group(1)}" + (f" {bend.group(2)}-{bend.group(3)} s" if bend.group(2) else "")


def turn_at(row: dict, second: int) -> list[float]:
    """The turns at ``second`` s of the episodes of ``row`` (one noise level) still upright then."""
    return [turns[second - 1] for turns in row["turn_by_second_degrees"] if len(turns) >= second]


def arcs_with_walks(snippets: list[str]) -> list[tuple[str, str]]:
    """(arc, its straight walk) for every arc among ``snippets`` whose straight walk is there too."""
    pairs = []
    for snippet in snippets:
        try:
            walk, _ = arc_parts(snippet)
        except ValueError:
            continue
        if walk in snippets:
            pairs.append((snippet, walk))
    return pairs


def _reference_turn(controllers: dict, arc: str, walk: str, second: int) -> str:
    """The reference's turn at ``second`` s on ``arc`` minus on ``walk``: the same for every controller and episode,
    so read from any episode that stayed upright that long."""
    def first(snippet):
        return next((turns[second - 1] for rows in controllers.values() for level in rows.get(snippet, {}).values()
                     for turns in level["reference_turn_by_second_degrees"] if len(turns) >= second), None)
    on_arc, straight = first(arc), first(walk)
    return "–" if on_arc is None or straight is None else f"{on_arc - straight:+.0f}°"


def table(controllers: dict, cue: dict, snippets: list[str], second: int) -> list[str]:
    """The markdown lines (module docstring). ``controllers``: npmp_noise's ``controllers``; ``cue``: npmp_arc_cue's
    ``primitives`` (may be empty)."""
    pairs = arcs_with_walks(snippets)
    measured = {name: rows for name, rows in controllers.items()
                if all(s in rows and "0" in rows[s] and len(rows[s]) >= 2 for s in snippets)}
    if not measured:
        raise ValueError(f"no controller in the results was measured noise-free and noisy on all of "
                         f"{', '.join(snippets)}")
    noisy = {name: max((k for k in rows[snippets[0]] if k != "0"), key=float) for name, rows in measured.items()}
    header = (["primitives", *map(short_name, snippets), "to the end: noise-free / noisy", "own vs mirror"]
              + [f"turn at {second} s vs straight: {short_name(arc)}" for arc, _ in pairs])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, rows in measured.items():
        path = name.split(":", 1)[-1]
        cells = [f"`{path.rsplit('/', 1)[-1] if path.startswith('runs/') else path}`"]
        ends, episodes, noisy_ends = 0, 0, 0
        for snippet in snippets:
            clean, rough = rows[snippet]["0"], rows[snippet][noisy[name]]
            cells.append(f"{clean['upright_steps'][0]} / {rough['median']:g}")
            ends += clean["upright_steps"][0] >= clean["of"]
            noisy_ends += sum(steps >= rough["of"] for steps in rough["upright_steps"])
            episodes += len(rough["upright_steps"])
        cells.append(f"{ends} of {len(snippets)} / {noisy_ends} of {episodes} (σ = {noisy[name]})")
        mirror = [row["own_vs_mirror"] for arc, row in cue.get(path, {}).items() if arc in snippets]
        cells.append(f"{min(mirror):.1e} – {max(mirror):.1e}" if mirror else "–")
        for arc, walk in pairs:
            both = []
            for level in ("0", noisy[name]):
                on_arc, straight = turn_at(rows[arc][level], second), turn_at(rows[walk][level], second)
                both.append(f"{statistics.mean(on_arc) - statistics.mean(straight):+.0f}" if on_arc and straight
                            else "–")
            cells.append(" / ".join(both))
        lines.append("| " + " | ".join(cells) + " |")
    reference = [f"{short_name(arc)} {_reference_turn(controllers, arc, walk, second)}" for arc, walk in pairs]
    if reference:
        lines.append("")
        lines.append(f"The reference's turn at {second} s vs straight: " + ", ".join(reference) + ".")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--noise-results", type=Path, required=True, help="an npmp_noise.py results file")
    p.add_argument("--cue-results", type=Path, help="an npmp_arc_cue.py results file")
    p.add_argument("--snippets", nargs="+", required=True, help="the columns, in order (walks and arcs)")
    p.add_argument("--turn-at", type=int, default=2, help="the whole second at which turns are compared")
    args = p.parse_args(argv)
    if args.turn_at < 1:
        fail(f"--turn-at must be a whole second >= 1, got {args.turn_at}")
    loaded = []
    for path in (args.noise_results, args.cue_results):
        if path is None:
            loaded.append({})
            continue
        try:
            loaded.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as e:
            fail(f"cannot read {path}: {e}")
    noise, cue = loaded
    if "controllers" not in noise:
        fail(f"{args.noise_results} holds no npmp_noise.py results (no 'controllers')")
    try:
        print("\n".join(table(noise["controllers"], cue.get("primitives", {}), args.snippets, args.turn_at)))
    except ValueError as e:
        fail(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
