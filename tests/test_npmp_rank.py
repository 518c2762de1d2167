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


def test_by_sequence_splits_episodes_by_the_chain_they_walked_and_whether_it_was_taught(tmp_path, capsys):
    import h5py
    chains = tmp_path / "chains.h5"
    with h5py.File(chains, "w") as f:
        f.attrs["chain_segments"] = ["pairA L@0+20 L@20+40 R@17+40", "seqB L@0+20 R@4+50 R@29+30"]
    taught = tmp_path / "taught"
    taught.mkdir()
    (taught / "meta.json").write_text(json.dumps({"clips": ["pairA"]}))
    walked = {"50000": ([["L", 0, 20], ["L", 20, 40], ["R", 17, 40], ["L", 17, 40]], 150, 1),   # pairA, past its end
              "50001": ([["L", 0, 20], ["R", 4, 50], ["R", 29, 30]], 60, 0),                  # seqB, falls within
              "50002": ([["L", 0, 20], ["R", 4, 50], ["R", 29, 30]], 100, 1),                 # seqB, to its end
              "50003": ([["L", 0, 20], ["L", 20, 40]], 25, 0)}                                 # too short to tell
    episodes = {seed: {"targets_reached": t, "steps": s, "fell": True, "chain": c} for seed, (c, s, t) in walked.items()}
    results = tmp_path / "r.json"
    results.write_text(json.dumps({"primitives": {str(taught): {KEY: episodes}, "elsewhere": {KEY: episodes}}}))
    out = tmp_path / "rank.json"
    assert main(["--results", str(results), "--key", KEY, "--primitives", str(taught), "elsewhere",
                 "--by-sequence", str(chains), "--out", str(out)]) == 0
    split = json.loads(out.read_text())["primitives"]
    classes = split[str(taught)]["by_sequence"]["classes"]
    assert classes["taught"] == {"episodes": 1, "targets": 1, "median_steps": 150.0, "falls_within": 0,
                                 "falls_in_last_60": 0, "median_steps_from_end": 50.0}
    # seqB is 100 steps long: the fall at 60 is within its last 60 steps; the two end 40 and 0 steps before its end
    assert classes["untaught"] == {"episodes": 2, "targets": 1, "median_steps": 80.0, "falls_within": 1,
                                   "falls_in_last_60": 1, "median_steps_from_end": -20.0}
    assert classes["short"]["episodes"] == 1 and set(split[str(taught)]["by_sequence"]["chains"]) == \
        {"pairA", "seqB", "short"}
    # primitives without a meta.json here: which chain is known, whether it was taught is not
    assert set(split["elsewhere"]["by_sequence"]["classes"]) == {"unknown", "short"}
    assert "untaught: 2 episodes" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        main(["--results", str(results), "--key", KEY, "--primitives", str(taught), "elsewhere",
              "--by-sequence", str(results)])
    assert stop.value.code == 2 and capsys.readouterr().err.startswith("error: --by-sequence:")


def test_the_pace_of_a_teacher_is_rank_correlated_with_the_falls_of_its_chains():
    """npmp_pace_falls: Spearman's rho on ranks with ties averaged; -1 where the falls rise as the pace drops."""
    from benchmarks.npmp_pace_falls import ranks, spearman

    np.testing.assert_array_equal(ranks(np.array([0.5, 0.9, 0.5, 0.7])), [1.5, 4.0, 1.5, 3.0])
    assert spearman([0.9, 0.8, 0.7, 0.6], [0.1, 0.3, 0.35, 1.0]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [2, 2, 2]) != spearman([1, 2, 3], [2, 2, 2])   # nan: nothing to rank


def test_falls_are_counted_per_segment_apart_for_the_same_turn_again_and_a_change(tmp_path, capsys):
    """--by-segment: an episode enters every segment it reaches and falls in the one its last step lies in; a
    segment with the clip before it is ``same``, another clip ``switch``; late segments pooled."""
    from benchmarks.npmp_rank import LAST_SEGMENT, by_segment

    L, R = "16_27-0", "16_27-0-mirror"
    chain = [[L, 0, 20], [L, 20, 43], [R, 17, 46], [R, 29, 34]]   # segments end at 20, 63, 109, 143
    episodes = {"1": {"chain": chain, "steps": 70, "fell": True},    # fell in the switch to R
                "2": {"chain": chain, "steps": 143, "fell": False},  # walked all four (the episode ended)
                "3": {"chain": chain, "steps": 120, "fell": True},   # fell in R again
                "4": {"chain": [[L, 0, 20]] + [[L, 29, 34]] * (LAST_SEGMENT + 1), "steps": 20 + 34 * 7 - 1,
                      "fell": True}}                                 # the late segments pooled
    counts = by_segment(episodes)
    assert counts["0 start"] == {"entered": 4, "fell": 0, "hazard": 0.0}
    assert counts["1 same"] == {"entered": 4, "fell": 0, "hazard": 0.0}
    assert counts["2 switch"] == {"entered": 3, "fell": 1, "hazard": 0.333}
    assert counts["3 same"]["entered"] == 3 and counts["3 same"]["fell"] == 1   # episodes 2, 3 and 4
    assert counts[f"{LAST_SEGMENT} same"] == {"entered": 2, "fell": 1, "hazard": 0.5}
    results = tmp_path / "r.json"
    results.write_text(json.dumps({"primitives": {name: {KEY: {s: {**e, "targets_reached": 0}
                                                              for s, e in episodes.items()}} for name in "ab"}}))
    assert main(["--results", str(results), "--key", KEY, "--primitives", "a", "b", "--by-segment"]) == 0
    assert "2 switch 1/3" in capsys.readouterr().out
