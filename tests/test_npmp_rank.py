"""benchmarks/npmp_rank.py: students ranked on paired episodes, with intervals that separate only what the episodes
show."""
import json

import numpy as np
import pytest

from benchmarks.npmp_rank import main, rank

KEY = "nearest, blend 7, lead 63, noise 0.02"


def rows(targets, steps):
    return {str(50000 + i): {"targets_reached": int(t), "steps": int(s), "fell": True}
            for i, (t, s) in enumerate(zip(targets, steps))}


def test_a_paired_gain_is_separated_where_the_totals_alone_overlap():
    rng = np.random.default_rng(0)
    hard = rng.integers(0, 3, size=200)            # each episode's own difficulty, shared by both students
    steps = rng.integers(60, 300, size=200)
    ranking = rank({"shipped": rows(hard, steps), "student": rows(hard + (rng.random(200) < 0.15), steps + 5),
                    "same": rows(hard, steps)})
    student, same = ranking["primitives"]["student"], ranking["primitives"]["same"]
    assert ranking["episodes"] == 200 and ranking["reference"] == "shipped"
    # the per-episode intervals overlap, but the paired difference leaves zero out
    assert student["targets_per_episode_95"][0] < ranking["primitives"]["shipped"]["targets_per_episode_95"][1]
    assert student["targets_verdict"] == "better" and student["targets_minus_reference_95"][0] > 0
    assert student["steps_verdict"] == "better" and student["steps_minus_reference"] == 5
    assert same["targets_verdict"] == same["steps_verdict"] == "not separated"
    worse = rank({"a": rows(hard, steps), "b": rows(hard, steps - 10)})["primitives"]["b"]
    assert worse["steps_verdict"] == "worse"
    # a primitives' intervals are the same whichever others are ranked beside it
    alone = rank({"shipped": rows(hard, steps), "student": rows(hard + (rng.random(200) < 0.15), steps + 5)})
    assert alone["primitives"]["shipped"] == ranking["primitives"]["shipped"]


def test_only_the_shared_seeds_count_and_bad_input_is_one_line(tmp_path, capsys):
    a, b = rows([1, 0, 2, 1], [100, 90, 200, 150]), rows([0, 0], [80, 70])
    results = tmp_path / "r.json"
    results.write_text(json.dumps({"primitives": {"A": {KEY: a}, "B": {KEY: b}}}))
    out = tmp_path / "rank.json"
    listed = tmp_path / "list.json"
    listed.write_text("[]")
    assert main(["--results", str(results), "--key", KEY, "--primitives", "A", "B", "--out", str(out)]) == 0
    ranking = json.loads(out.read_text())
    assert ranking["episodes"] == 2 and ranking["primitives"]["B"]["targets_minus_reference"] == -0.5
    for argv, message in ((["--primitives", "A"], "two or more"), (["--primitives", "A", "C"], "no episodes"),
                          (["--primitives", "A", "B", "--key", "walk"], "no episodes"),
                          (["--primitives", "A", "B", "--results", str(listed)], "not a results file")):
        with pytest.raises(SystemExit) as stop:
            main(["--results", str(results), "--key", KEY, *argv])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error:") and message in err and err.count("\n") == 1
