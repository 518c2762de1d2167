"""A high level that chooses clips (issue 13; docs/npmp.md, "A high level that chooses clips"): the clip graph's
entries, the chain the encoder reads, the same chain written as a snippet for the planner, the environment whose
action is a clip, and the benchmark on `humanoid`."""
import json
import shutil

import h5py
import numpy as np
import pytest
import torch

from tests.conftest import ROOT

TURNS = ROOT / "data" / "mocap" / "cmu_turns.h5"
WALK, LEFT, RIGHT = "07_01-0-loop4", "16_27-0", "16_27-0-mirror"


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """A looped walk and the shipped walking turns, their references, a clip graph and tiny primitives."""
    from envs.mocap import convert
    from envs.mocap.tracking import reference_playback
    from priors.npmp import NPMP, NPMPConfig, load_primitives, save_primitives
    from priors.npmp.reference import ClipGraph

    root = tmp_path_factory.mktemp("clips")
    walks = root / "walks.h5"
    assert convert.main(["--clips", "07_01", "--loop", "4", "--output", str(walks)]) == 0
    where = {WALK: walks, LEFT: TURNS, RIGHT: TURNS}
    references = {clip: reference_playback(clip, 0, path) for clip, path in where.items()}
    shipped, meta = load_primitives(ROOT / "data" / "primitives" / "npmp")
    torch.manual_seed(0)
    model = NPMP(NPMPConfig(state_dim=shipped.config.state_dim, action_dim=shipped.config.action_dim, latent_dim=4,
                            encoder_hidden=(16,), decoder_hidden=(16,), lookahead=2, lookahead_source="reference"))
    save_primitives(model, root / "tiny", meta["obs_groups"], clips=[WALK])
    return dict(root=root, walks=walks, where=where, references=references, graph=ClipGraph(references),
                primitives=root / "tiny", obs_groups=meta["obs_groups"])


def test_turns_are_entered_before_their_turn_and_a_clip_continues_itself_exactly(clips):
    from envs.mocap.tracking import heading  # noqa: F401  (the roots' headings are the clips' own)
    from priors.npmp.reference import ClipGraph, ReferenceChain

    graph, references = clips["graph"], clips["references"]
    for clip in (LEFT, RIGHT):
        turn = np.unwrap(references[clip].root[:, 2])
        total = turn[-1] - turn[0]
        assert abs(np.degrees(total)) > 70
        for j in graph.entries[clip]:   # at least 80 % of the turn still ahead of every entry
            assert abs(turn[-1] - turn[j + graph.window]) >= 0.8 * abs(total) - 1e-9
        assert graph.entries[clip].max() < len(references[clip].states) - 20
        # skip_windup: the turn is entered no earlier than where its heading lies farthest against the turn
        windup_end = int(np.argmin(np.sign(total) * (turn - turn[0])))
        assert windup_end > graph.window and graph.entries[clip].min() + graph.window < windup_end
        skipping = ClipGraph(references, skip_windup=True)
        assert skipping.entries[clip].min() + graph.window == windup_end
        assert set(skipping.entries[clip]) <= set(graph.entries[clip])
    np.testing.assert_array_equal(ClipGraph(references, skip_windup=True).entries[WALK], graph.entries[WALK])
    with pytest.raises(ValueError, match="no entry left"):
        ClipGraph(references, min_segment=52, skip_windup=True)   # the turns end too soon after their wind-up
    ClipGraph(references, min_segment=52)
    chain = ReferenceChain(None, graph, WALK, 40)
    assert chain.append(WALK, 30) == (40, 0.0)   # its own next frame matches exactly
    # where the next frame would be is the last step repeated: within millimetres of where it is
    np.testing.assert_allclose(chain.root_poses(), references[WALK].root[:70], atol=0.01)
    np.testing.assert_array_equal(chain._states, references[WALK].states[:70])
    entry, distance = chain.append(LEFT)
    assert entry in graph.entries[LEFT] + graph.window and distance > 0
    assert chain.segments == [(WALK, 0, 40), (WALK, 40, 30), (LEFT, entry, len(references[LEFT].states) - entry)]
    poses = chain.root_poses()
    steps = np.linalg.norm(np.diff(poses[:, :2], axis=0), axis=1)
    assert steps.max() < 0.1   # the turn's root goes on from where the walk's ends: no jump
    assert np.degrees(np.unwrap(poses[:, 2])[-1] - poses[69, 2]) > 60   # and turns left from there
    with pytest.raises(KeyError, match="no clip"):
        chain.append("09_01-0")
    # primitives that read states far ahead and the path read the chain as they read the same frames as a clip
    from priors.npmp import NPMP, NPMPConfig
    from priors.npmp.reference import reference_input

    config = NPMPConfig(state_dim=chain._states.shape[1], action_dim=2, latent_dim=2, encoder_hidden=(4,),
                        decoder_hidden=(4,), lookahead=2, lookahead_source="reference", far_offsets=(10, 60),
                        path_offsets=(15,))
    far_chain = ReferenceChain.from_segments(NPMP(config), graph, chain.segments)
    as_clip = reference_input(far_chain.model, torch.as_tensor(far_chain._states),
                              torch.as_tensor(far_chain.root_poses(), dtype=torch.float32))
    for t in (0, 35, len(far_chain) - 20, len(far_chain) - 1):
        torch.testing.assert_close(far_chain.read(t), as_clip(t))
    assert torch.equal(far_chain.read(0)[2 * config.state_dim:3 * config.state_dim],
                       torch.as_tensor(far_chain._states[10]))


def test_a_chain_written_for_the_planner_is_the_chain_the_encoder_reads(clips, capsys):
    """``pipelines.npmp chain``: the snippet's reference (played back) has the chain's root poses and, away from
    the joins, its states."""
    from envs.mocap.tracking import reference_playback
    from pipelines.npmp.__main__ import main as npmp_main
    from priors.npmp.reference import ReferenceChain

    out = clips["root"] / "chains.h5"
    spec = f"c1={WALK}:40,{LEFT},{WALK}:30,{RIGHT}"
    assert npmp_main(["chain", "--mocap", str(clips["walks"]), str(TURNS), "--chain", spec, "--out", str(out)]) == 0
    assert "wrote 1 chains" in capsys.readouterr().out
    chain = ReferenceChain(None, clips["graph"], WALK, 40)
    for clip, frames in ((LEFT, None), (WALK, 30), (RIGHT, None)):
        chain.append(clip, frames)
    played = reference_playback("c1", 0, out)
    assert len(played.states) == len(chain)
    turn = np.angle(np.exp(1j * (played.root[:, 2] - chain.root_poses()[:, 2])))
    np.testing.assert_allclose(played.root[:, :2], chain.root_poses()[:, :2], atol=1e-4)
    assert np.abs(turn).max() < 1e-4
    # states read from whole clips against states of the chain played back: the same frames, velocities included
    # (the pieces' own, not differences across a join); at a join only the servos' activations lag the jump
    assert np.median(np.abs(played.states - chain._states), axis=1).max() < 1e-3
    assert np.abs(played.states - chain._states).mean(axis=1).max() < 0.3
    # the joins the file keeps: where each clip after the first begins in the chain
    from pipelines.npmp.chains import chain_joins
    starts = np.cumsum([frames for _, _, frames in chain.segments])[:-1].tolist()
    assert chain_joins(out) == {"c1": starts} and starts[0] == 40 and chain_joins(clips["walks"]) == {}
    for bad, message in ((f"c2={WALK},{LEFT}", "the first with its frames"), (f"c2={WALK}:40", "two clips"),
                         (f"c2={WALK}:4x,{LEFT}", "whole number"), (f"c2={WALK}:40,09_01-0", "09_01-0 in none")):
        assert npmp_main(["chain", "--mocap", str(clips["walks"]), str(TURNS), "--chain", bad,
                          "--out", str(clips["root"] / "bad.h5")]) == 2
        assert message in capsys.readouterr().err
    assert not (clips["root"] / "bad.h5").exists()


def test_blended_joins_spread_the_jump_and_the_planner_gets_the_same_chain(clips, capsys):
    """``blend``: the chain's last frames fade into the new clip's frames before its entry (Kovar et al.'s
    transitions); the chain written for the planner with the same blend plays back to it."""
    from envs.mocap.tracking import reference_playback
    from pipelines.npmp.__main__ import main as npmp_main
    from priors.npmp.reference import ReferenceChain, blend_weights

    graph, items = clips["graph"], ((LEFT, None), (WALK, 30), (RIGHT, None))
    cut, blended = ReferenceChain(None, graph, WALK, 40), ReferenceChain(None, graph, WALK, 40, blend=5)
    for clip, frames in items:
        assert cut.append(clip, frames) == blended.append(clip, frames)   # the same entries: matched before blending
    assert cut.segments == blended.segments and len(cut) == len(blended)
    starts = np.cumsum([0] + [n for _, _, n in cut.segments])[1:-1]
    jump = lambda chain: np.abs(np.diff(graph.standardise(chain._states), axis=0)).mean(axis=1)  # noqa: E731
    for s in starts:   # each join's jump spread over the blend: the largest step near it is less than half the cut's
        assert jump(blended)[s - 6:s + 1].max() < 0.5 * jump(cut)[s - 1]
    np.testing.assert_array_equal(blended._states[starts[-1]:], cut._states[starts[-1]:])   # the clip's own frames
    share = blend_weights(5)
    assert np.all(np.diff(share) > 0) and 0 < share[0] < 0.5 < share[-1] < 1
    rebuilt = ReferenceChain.from_segments(None, graph, blended.segments, blend=5)
    np.testing.assert_array_equal(rebuilt._states, blended._states)
    np.testing.assert_array_equal(rebuilt.root_poses(), blended.root_poses())
    out = clips["root"] / "blended.h5"
    spec = f"c1={WALK}:40,{LEFT},{WALK}:30,{RIGHT}"
    assert npmp_main(["chain", "--blend", "5", "--mocap", str(clips["walks"]), str(TURNS), "--chain", spec,
                      "--out", str(out)]) == 0
    played = reference_playback("c1", 0, out)
    np.testing.assert_allclose(played.root[:, :2], blended.root_poses()[:, :2], atol=1e-4)
    assert np.abs(np.angle(np.exp(1j * (played.root[:, 2] - blended.root_poses()[:, 2])))).max() < 0.01
    # joint angles and velocities blended linearly, the body's positions computed from them: nearly the same
    assert np.median(np.abs(played.states - blended._states), axis=1).max() < 1e-3
    assert npmp_main(["chain", "--blend", "-1", "--mocap", str(clips["walks"]), str(TURNS), "--chain", spec,
                      "--out", str(clips["root"] / "bad.h5")]) == 2
    assert "--blend must be >= 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="blend must be >= 0"):
        ReferenceChain(None, graph, WALK, 40, blend=-1)


@pytest.mark.slow
def test_chains_that_share_their_start_share_their_teacher_there(clips, capsys):
    """``collect --branch``: a chain's LQR law is built around the run of another chain it shares its first frames
    with, replayed to the branch point, then planned on (docs/npmp.md, "The tube a student leaves")."""
    from pipelines.npmp.__main__ import main as npmp_main
    from pipelines.npmp.data import read_results

    chains = clips["root"] / "branching.h5"
    assert npmp_main(["chain", "--mocap", str(clips["walks"]), str(TURNS), "--chain", f"left={WALK}:40,{LEFT}",
                      "--chain", f"right={WALK}:40,{RIGHT}", "--out", str(chains)]) == 0
    planner = [arg for pair in ("horizon=4", "knots=1", "candidates=4", "iterations=1", "method=ps")
               for arg in ("--planner-set", pair)]
    common = ["collect", "--experts", "mpc", "--expert-policy", "lqr", "--held-out", "09_01-0", "--processes", "1",
              "--trajectories", "1", "--perturbation-trajectories", "1", "--ending", "fall", "--mocap", str(chains),
              *planner]
    parent, child = clips["root"] / "left.h5", clips["root"] / "right.h5"
    assert npmp_main([*common, "--snippets", "left", "--data", str(parent)]) == 0
    assert npmp_main([*common, "--snippets", "right", "--plan-from", str(parent), "--branch", "right=left:20",
                      "--data", str(child)]) == 0
    (left,), _ = read_results(parent)
    (right,), meta = read_results(child)
    # the heading diagnostic: the noise-free law (follow_walker) walks the planner's run, so both depart from the
    # reference's heading alike, frame by frame
    from benchmarks.npmp_heading import main as heading_main
    report = clips["root"] / "heading.json"
    assert heading_main(["--mocap", str(chains), "--plans", str(parent), "--law", str(parent), "--snippets", "left",
                         "--every", "1", "--results", str(report)]) == 0
    rows = json.loads(report.read_text())["snippets"]["left"]
    plan, law = rows[f"plan:{parent}"], rows[f"law:{parent}"]
    assert plan["degrees"][0] == 0.0 and plan["frames"] == len(left["plan"]["physics_states"])
    n = min(plan["frames"], law["frames"] + 1)
    assert n > 20 and max(map(abs, plan["degrees"][:n])) > 0.5
    np.testing.assert_allclose(law["degrees"][:n], plan["degrees"][:n], atol=0.2)
    with h5py.File(chains, "r") as f:   # and how far the run's pelvis sinks below the reference's
        reference_z = f["left"]["walkers/walker_0/position"][2]
    m = min(len(reference_z), len(left["plan"]["physics_states"]))
    below = reference_z[:m] - left["plan"]["physics_states"][:m, 3]
    assert plan["root_below_reference_max_m"] == pytest.approx(below.max(), abs=1e-3)
    assert plan["root_below_at_frame"] == int(np.argmax(below))
    assert 0 < plan["speed_ratio"] < 1.5 and plan["frames_over_termination_error"] >= 0   # the pace, read alike
    assert meta["branches"] == {"right": ["left", 20]} and right["attrs"]["branch"] == "left@20"
    assert int(right["plan"]["branched_at"]) == 20
    np.testing.assert_array_equal(right["plan"]["commands"][:20], left["plan"]["commands"][:20])
    np.testing.assert_allclose(right["plan"]["physics_states"][:21], left["plan"]["physics_states"][:21], atol=1e-9)
    assert not np.allclose(right["plan"]["commands"][20:23], left["plan"]["commands"][20:23])   # planned on its own
    merged = clips["root"] / "tree.h5"   # a tree of branches is taught as one collection
    assert npmp_main(["merge", "--mixed-rounds", "--out", str(merged), str(parent), str(child)]) == 0
    assert {r["snippet"]: r["attrs"].get("branch") for r in read_results(merged)[0]} == {"left": None,
                                                                                          "right": "left@20"}
    capsys.readouterr()
    over = clips["root"] / "over.h5"   # a snippet in two inputs: refused, or with --overlay the first input's
    assert npmp_main(["merge", "--mixed-rounds", "--out", str(over), str(child), str(merged)]) == 2
    assert "merge each snippet once" in capsys.readouterr().err and not over.exists()
    assert npmp_main(["merge", "--mixed-rounds", "--overlay", "--out", str(over), str(child), str(merged)]) == 0
    results, over_meta = read_results(over)
    assert sorted(r["snippet"] for r in results) == ["left", "right"]
    assert over_meta["overlaid"] == {"right": [str(merged)]}   # the later input's copy is the one left out
    assert npmp_main(["merge", "--mixed-rounds", "--overlay", "--out", str(over), str(merged), str(child)]) == 0
    assert read_results(over)[1]["overlaid"] == {"right": [str(child)]}   # the first input holding it wins
    # an overlaid file merges again: where its snippets came from is kept with it, not compared as a setting
    twice = clips["root"] / "twice.h5"
    assert npmp_main(["merge", "--mixed-rounds", "--overlay", "--out", str(twice), str(over), str(child)]) == 0
    twice_meta = read_results(twice)[1]
    assert twice_meta["overlaid"] == {"right": [str(child)]}
    assert twice_meta["merged_from"][0]["overlaid"] == {"right": [str(child)]}
    capsys.readouterr()
    for bad, message in ((["--branch", "right=left:45"], "differ before the branch point"),
                         (["--branch", "right=nowhere:30"], "in none of the --plan-from"),
                         (["--branch", "right=left"], "SNIPPET=PARENT:FRAME")):
        out = clips["root"] / "bad_branch.h5"
        assert npmp_main([*common, "--snippets", "right", "--plan-from", str(parent), *bad, "--data", str(out)]) == 2
        assert message in capsys.readouterr().err and not out.exists()
    assert npmp_main([*common, "--snippets", "right", "--branch", "right=left:20", "--data", str(out)]) == 2
    assert "--branch needs" in capsys.readouterr().err
    # a chain with one clip more, written to a file of its own, branches from its parent planned on the first file:
    # the references themselves are compared (the same clips, so the same graph and entries)
    longer = clips["root"] / "longer.h5"
    assert npmp_main(["chain", "--mocap", str(clips["walks"]), str(TURNS), "--chain", f"more={WALK}:40,{LEFT},{WALK}",
                      "--chain", f"other={WALK}:40,{RIGHT}", "--out", str(longer)]) == 0
    on_longer = [str(longer) if arg == str(chains) else arg for arg in common]
    grown = clips["root"] / "more.h5"
    assert npmp_main([*on_longer, "--snippets", "more", "--plan-from", str(parent), "--branch", "more=left:20",
                      "--data", str(grown)]) == 0
    (more,), _ = read_results(grown)
    assert more["attrs"]["mocap"] == str(longer) and more["attrs"]["branch"] == "left@20"
    np.testing.assert_array_equal(more["plan"]["commands"][:20], left["plan"]["commands"][:20])
    capsys.readouterr()
    assert npmp_main([*on_longer, "--snippets", "other", "--plan-from", str(parent), "--branch", "other=left:45",
                      "--data", str(clips["root"] / "bad_other.h5")]) == 2
    assert "differ before the branch point" in capsys.readouterr().err
    # the runs kept without their rollouts (``teachers``), naming a copy of the chains' mocap: the law rebuilt from
    # them is the one rebuilt from the collections, rollout for rollout
    import shutil
    copy, runs = clips["root"] / "chains_copy.h5", clips["root"] / "runs.h5"
    shutil.copy(chains, copy)
    assert npmp_main(["teachers", str(parent), str(child), "--mocap", str(copy), "--out", str(runs)]) == 0
    kept, runs_meta = read_results(runs)
    assert [(r["snippet"], "bc" in r, r["attrs"]["mocap"]) for r in kept] == [("left", False, str(copy)),
                                                                            ("right", False, str(copy))]
    assert runs_meta["planner"] == meta["planner"] and runs_meta["teacher_runs_from"][1]["branches"] == meta["branches"]
    np.testing.assert_array_equal(kept[1]["plan"]["commands"], right["plan"]["commands"])
    again = clips["root"] / "again.h5"
    moved = [str(copy) if arg == str(chains) else arg for arg in common]
    assert npmp_main([*moved, "--snippets", "right", "--plan-from", str(runs), "--data", str(again)]) == 0
    (rebuilt,), _ = read_results(again)
    np.testing.assert_array_equal(rebuilt["bc"]["actions"], right["bc"]["actions"])
    np.testing.assert_array_equal(rebuilt["bc"]["states"], right["bc"]["states"])
    # a run planned again replaces the kept one (``--overlay``: the first input holding it), and a subset is kept
    # (``--snippets``): the branched run over the kept file's, then the parent alone
    fresh, replaced = clips["root"] / "fresh.h5", clips["root"] / "replaced.h5"
    assert npmp_main([*moved, "--snippets", "right", "--data", str(fresh)]) == 0   # planned from its first frame
    (planned,), _ = read_results(fresh)
    assert not np.allclose(planned["plan"]["commands"], right["plan"]["commands"])   # apart after the branch
    for inputs, expected in (([fresh, runs], planned), ([runs, fresh], right)):
        assert npmp_main(["teachers", *map(str, inputs), "--overlay", "--mocap", str(copy), "--out",
                          str(replaced)]) == 0
        by_snippet = {r["snippet"]: r for r in read_results(replaced)[0]}
        assert sorted(by_snippet) == ["left", "right"]
        np.testing.assert_array_equal(by_snippet["right"]["plan"]["commands"], expected["plan"]["commands"])
        replaced.unlink()
    parent_only = clips["root"] / "parent_only.h5"
    assert npmp_main(["teachers", str(runs), "--snippets", "left", "--mocap", str(copy), "--out",
                      str(parent_only)]) == 0
    (only,), _ = read_results(parent_only)
    assert only["snippet"] == "left"
    np.testing.assert_array_equal(only["plan"]["commands"], left["plan"]["commands"])
    capsys.readouterr()
    for inputs, mocap, extra, message in (([parent], TURNS, [], "is not the motion"),
                                          ([parent, merged], copy, [], "more than one"),
                                          ([runs, runs], copy, [], "more than one"),
                                          ([runs], copy, ["--snippets", "left", "up"], "no planner run of up")):
        bad = clips["root"] / "bad_runs.h5"
        assert npmp_main(["teachers", *map(str, inputs), "--mocap", str(mocap), "--out", str(bad), *extra]) == 2
        assert message in capsys.readouterr().err and not bad.exists()


def test_the_high_level_chooses_clips_and_the_primitives_follow_the_chain(clips):
    import envs
    from priors.npmp import load_primitives
    from priors.reuse import CLIP_OBS, ClipChoiceActionEnv

    model, _ = load_primitives(clips["primitives"])
    env = ClipChoiceActionEnv(envs.make("humanoid", seed=0, start_snippet=WALK, ref_path=str(clips["walks"])),
                              model, clips["graph"], [WALK, LEFT, RIGHT], WALK, clips["obs_groups"],
                              start_frames=30, segment_frames={WALK: 20}, blend=3)
    assert env.action_space.n == 3
    obs, _ = env.reset(seed=0)
    assert obs[CLIP_OBS].tolist() == [0.0, 0.0, 0.0]
    obs, reward, terminated, truncated, info = env.step(0)
    assert obs[CLIP_OBS].tolist() == [1.0, 0.0, 0.0] and info["clip"] == WALK and info["entry"] == 30
    if not (terminated or truncated):   # ran until lead frames of the chain were left
        assert info["control_steps"] == 30 + 20 - env.lead and len(env.chain) == 50
        captured = env.get_state()
        after = env.step(1)
        env.set_state(captured)
        again = env.step(1)
        assert after[4]["control_steps"] == again[4]["control_steps"] and after[1] == again[1]
        np.testing.assert_array_equal(after[0]["proprio"], again[0]["proprio"])
    with pytest.raises(ValueError, match="choice index"):
        env.step(3)
    with pytest.raises(ValueError, match="blend must lie in"):   # blended frames must lie ahead of the walker
        ClipChoiceActionEnv(envs.make("humanoid", seed=0, start_snippet=WALK, ref_path=str(clips["walks"])),
                            model, clips["graph"], [WALK], WALK, clips["obs_groups"], blend=env.lead)
    with pytest.raises(ValueError, match="choices must be clips"):
        ClipChoiceActionEnv(envs.make("humanoid", seed=0, start_snippet=WALK, ref_path=str(clips["walks"])),
                            model, clips["graph"], ["09_01-0"], WALK, clips["obs_groups"])


def test_the_high_level_may_see_only_the_target_and_its_last_choice(clips):
    """``high_level_groups``: the high level's observation keeps only those groups; the primitives still read the
    body, so the walk is the same step for step."""
    import envs
    from priors.npmp import load_primitives
    from priors.reuse import CLIP_OBS, ClipChoiceActionEnv

    model, _ = load_primitives(clips["primitives"])

    def make(groups):
        return ClipChoiceActionEnv(envs.make("humanoid", seed=0, start_snippet=WALK, ref_path=str(clips["walks"])),
                                   model, clips["graph"], [WALK, LEFT], WALK, clips["obs_groups"],
                                   segment_frames={WALK: 20}, high_level_groups=groups)

    full, narrow = make(None), make(("task", CLIP_OBS))
    assert sorted(narrow.observation_space.spaces) == ["clip", "task"]
    assert "proprio" in full.observation_space.spaces
    for env in (full, narrow):
        env.reset(seed=1)
    a, b = full.step(1), narrow.step(1)
    assert sorted(b[0]) == ["clip", "task"] and b[0]["clip"].tolist() == [0.0, 1.0]
    np.testing.assert_array_equal(a[0]["task"], b[0]["task"])
    assert a[1] == b[1] and a[4]["control_steps"] == b[4]["control_steps"]
    with pytest.raises(ValueError, match="observation groups must be among"):
        make(("target",))


def test_the_high_level_sees_where_the_clips_it_chose_will_take_the_walker(clips):
    """``plan``: where the chain already chosen ends, in the heading frame of the walker's current frame. A choice
    takes effect only ``lead`` frames later, so this is what tells two choices made from the same place apart."""
    import envs
    from priors.npmp import load_primitives
    from priors.reuse import PLAN_OBS, ClipChoiceActionEnv, plan_features

    model, _ = load_primitives(clips["primitives"])
    env = ClipChoiceActionEnv(envs.make("humanoid", seed=0, start_snippet=WALK, ref_path=str(clips["walks"])),
                              model, clips["graph"], [WALK, LEFT, RIGHT], WALK, clips["obs_groups"],
                              start_frames=30, segment_frames={WALK: 20}, high_level_groups=("task", PLAN_OBS))
    obs, _ = env.reset(seed=0)
    ahead, left, sin, cos = obs[PLAN_OBS]
    assert 0.5 < ahead < 2.0 and abs(left) < 0.2 and abs(sin) < 0.2 and cos > 0.95   # 1 s of a straight walk ahead
    captured, ends = env.get_state(), {}
    for choice, clip in ((1, LEFT), (2, RIGHT)):
        env.set_state(captured)
        obs, *_ = env.step(choice)
        np.testing.assert_allclose(obs[PLAN_OBS], plan_features(env.chain.root_poses(), env._t), atol=1e-6)
        poses = env.chain.root_poses()   # the same by complex numbers: the end seen from the walker's frame
        here = poses[min(env._t, len(poses) - 1)]
        offset = complex(*(poses[-1, :2] - here[:2])) * np.exp(-1j * here[2])
        np.testing.assert_allclose(obs[PLAN_OBS][:2], [-offset.imag, offset.real], atol=1e-5)   # it walks along -y
        ends[clip] = obs[PLAN_OBS]
    # the left turn's chain ends turned (and lying) to the left of the right turn's
    assert ends[LEFT][2] > 0.3 > -0.3 > ends[RIGHT][2] and ends[LEFT][1] > ends[RIGHT][1]


def test_the_benchmark_on_humanoid_keeps_its_episodes_and_refuses_bad_input(clips, capsys):
    from benchmarks.npmp_clips_humanoid import main

    results = clips["root"] / "clips.json"
    common = ["--mocap", str(clips["walks"]), str(TURNS), "--clips", f"{WALK}:20", LEFT, RIGHT,
              "--primitives", str(clips["primitives"]), "--episodes", "1", "--results", str(results)]
    assert main([*common, "--controllers", "walk", "random", "nearest", "planned", "--depth", "1"]) == 0
    rows = json.loads(results.read_text())["primitives"][str(clips["primitives"])]
    assert sorted(rows) == ["nearest", "planned, depth 1", "random", "walk"]
    for row in rows.values():
        episode = row["0"]
        assert episode["steps"] > 0 and episode["segments"] >= 1 and sum(episode["chosen"].values()) == \
            episode["segments"]
    assert rows["walk"]["0"]["chosen"] == {WALK: rows["walk"]["0"]["segments"]}
    for row in rows.values():   # the chain followed: the start, then one segment per choice, in order
        chain = row["0"]["chain"]
        assert chain[0] == [WALK, 0, 30] and len(chain) == row["0"]["segments"] + 1   # --start-frames 30
        assert sorted({clip for clip, _, _ in chain[1:]}) == sorted(row["0"]["chosen"])
    capsys.readouterr()
    assert main([*common, "--controllers", "walk"]) == 0
    assert "episode 0" not in capsys.readouterr().out   # kept, not run again
    assert main([*common, "--controllers", "walk", "--action-noise", "0.1"]) == 0   # kept apart from noise-free
    rows = json.loads(results.read_text())["primitives"][str(clips["primitives"])]
    assert "walk, noise 0.1" in rows and rows["walk, noise 0.1"]["0"]["steps"] > 0
    # the perfect tracker's bound: shares grow with the time allowed and never pass what is reached at all
    assert main([*common, "--controllers", "walk", "--reach", "20", "--reach-depth", "2"]) == 0
    (bound,) = json.loads(results.read_text())["reach"].values()
    shares = list(bound["share_reached_within_seconds"].values())
    assert bound["resets"] == 20 and bound["chains"] == 3 + 9
    assert shares == sorted(shares) and 0.0 <= shares[-1] <= 1.0 - bound["share_never_reached"] + 1e-9
    for bad, message in ((["--clips", "09_01-0", LEFT], "09_01-0 in none"), (["--clips", f"{WALK}:5"], ">= 12"),
                         (["--episodes", "0"], "--episodes >= 1"), (["--action-noise", "-1"], "--action-noise >= 0"),
                         (["--reach-depth", "0", "--reach", "2"],
                                                                     "--reach-depth in [1, 6]")):
        with pytest.raises(SystemExit) as exit_:
            main([*common, *bad])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_committee_of_one_set_with_itself_walks_as_the_set(clips, capsys, tmp_path):
    """--primitives A+B: the members' commands averaged, each member with its own latent; two copies of one set act
    exactly as the set alone, and members that read other observation groups are refused."""
    from benchmarks.npmp_clips_humanoid import main

    one = str(clips["primitives"])
    results = tmp_path / "committee.json"
    common = ["--mocap", str(clips["walks"]), str(TURNS), "--clips", f"{WALK}:20", LEFT, RIGHT, "--episodes", "1",
              "--controllers", "nearest", "--action-noise", "0.02", "--results", str(results)]
    assert main([*common, "--primitives", one, f"{one}+{one}"]) == 0
    rows = json.loads(results.read_text())["primitives"]
    alone, committee = (rows[name]["nearest, noise 0.02"]["0"] for name in (one, f"{one}+{one}"))
    assert committee == alone and alone["steps"] > 0
    other = tmp_path / "other"
    shutil.copytree(one, other)
    meta = json.loads((other / "meta.json").read_text())
    meta["obs_groups"] = {"walker": sum(meta["obs_groups"].values())}   # as many features, another group
    (other / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(SystemExit) as exit_:
        main([*common, "--primitives", f"{one}+{other}"])
    assert exit_.value.code == 2 and "observation groups" in capsys.readouterr().err


def test_the_walked_bound_walks_each_sequence_once_and_lays_it_on_every_episode(clips, capsys):
    """--walked: the tree of choices walked from one episode; a leaf's choices walked again give its path, and from
    another episode's start the same path moved there (the bound lays one tree on every episode)."""
    import envs
    from benchmarks.npmp_clips_humanoid import main, walked_tree, walker_pose
    from priors.npmp import load_primitives
    from priors.npmp.reference import move_poses
    from priors.reuse import ClipChoiceActionEnv

    model, meta = load_primitives(clips["primitives"])
    walker = envs.make("humanoid", seed=0, start_snippet=WALK, ref_path=str(clips["walks"]))
    env = ClipChoiceActionEnv(walker, model, clips["graph"], [WALK, LEFT, RIGHT], WALK, meta["obs_groups"], 30,
                              segment_frames={WALK: 20})
    env.reset(seed=5)
    origin, leaves = walker_pose(env), walked_tree(env, 2)
    assert 3 <= len(leaves) <= 3 + 9 and all(1 <= len(choices) <= 2 for _, _, choices in leaves)
    assert len({tuple(choices) for _, _, choices in leaves}) == len(leaves)
    path, fell, choices = max(leaves, key=lambda leaf: len(leaf[0]))
    for seed in (5, 6):
        env.reset(seed=seed)
        pose, again = walker_pose(env), [walker_pose(env)[:2]]
        for choice in choices:
            *_, info = env.step(choice)
            again.extend(info["root_path"][:, :2])
        laid = move_poses(np.c_[path, np.zeros(len(path))], origin, pose)[:, :2]
        np.testing.assert_allclose(np.array(again), laid, atol=1e-6 if seed == 5 else 0.02)
    env.close()
    results = clips["root"] / "walked.json"
    common = ["--mocap", str(clips["walks"]), str(TURNS), "--clips", f"{WALK}:20", LEFT, RIGHT, "--primitives",
              str(clips["primitives"]), "--episodes", "3", "--controllers", "walk", "--results", str(results)]
    assert main([*common, "--walked", "4", "--walked-depth", "2"]) == 0
    (bound,) = json.loads(results.read_text())["walked"][str(clips["primitives"])].values()
    assert bound["resets"] == 4 and bound["sequences"] == len(leaves) and bound["depth"] == 2
    assert sorted(len(w["choices"]) for w in bound["walked"]) == sorted(len(c) for _, _, c in leaves)
    capsys.readouterr()
    assert main([*common, "--walked", "4", "--walked-depth", "2"]) == 0
    assert "walked (" not in capsys.readouterr().out   # kept for these episodes, not walked again
    assert main([*common, "--walked", "4", "--walked-depth", "2", "--first-seed", "7"]) == 0
    assert "walked (" in capsys.readouterr().out       # other episodes: measured again
    assert json.loads(results.read_text())["walked"][str(clips["primitives"])][
        "depth 2, start 30"]["first_seed"] == 7
    shares = list(bound["share_reached_within_seconds"].values())
    assert shares == sorted(shares) and shares[-1] <= 1.0 - bound["share_never_reached"] + 1e-9
    for bad in (["--walked", "2", "--walked-depth", "0"], ["--walked", "2", "--action-noise", "0.1"]):
        with pytest.raises(SystemExit) as exit_:
            main([*common, *bad])
        assert exit_.value.code == 2 and "--walked" in capsys.readouterr().err


def test_the_benchmark_s_action_noise_is_clipped_and_drawn_again_for_each_seed(clips):
    import envs
    from benchmarks.npmp_clips_humanoid import NoisyCommands

    env = NoisyCommands(envs.make("humanoid", seed=0, start_snippet=WALK, ref_path=str(clips["walks"])), 0.5)
    command = np.full(env.action_space.shape, 0.9, np.float32)

    def draws(seed):
        env.reset(seed=seed)
        return np.stack([env.action(command) for _ in range(3)])

    first = draws(3)
    assert np.array_equal(first, draws(3)) and not np.allclose(first, draws(4))   # per seed, and seeds differ
    assert first.max() <= 1.0 and (first == 1.0).any() and first.std() > 0.1      # clipped, and noisy
    env.close()


def test_a_target_counts_as_reached_after_ten_steps_within_a_metre():
    from benchmarks.npmp_clips_humanoid import first_reached

    target = np.array([5.0, 0.0])
    path = np.stack([np.linspace(0.0, 10.0, 101), np.full(101, 0.5)], axis=1)   # passes 0.5 m beside it, 0.1 m a step
    inside = np.flatnonzero(np.linalg.norm(path - target, axis=1) < 1.0)
    assert first_reached(path, target) == inside[0] + 9
    assert first_reached(path[: inside[0] + 9], target) is None   # nine steps within 1 m are not enough
    assert first_reached(path + [0.0, 1.0], target) is None       # 1.5 m beside it: never


def test_a_dqn_high_level_chooses_clips_through_train_py(clips, capsys):
    """``--agent npmp-clips``: the run counts control steps, not decisions, and logs the episodes' segments."""
    import train
    from tests.test_cli import scalars

    run_dir = clips["root"] / "run"
    code = train.main(["--env", "humanoid", "--agent", "npmp-clips", "--steps", "300", "--logdir", str(run_dir),
                       "--set", f"primitives={clips['primitives']}", "--set", f"clips={WALK}:20,{LEFT},{RIGHT}",
                       "--set", f"clip_mocap={clips['walks']},{TURNS}", "--set", "blend=3", "--set", "learning_starts=4",
                       "--set", "batch_size=4", "--set", "high_level_obs=task,clip,plan", "--eval-every", "1000",
                       "--eval-episodes", "1", "--video-every", "300"])
    assert code == 0, capsys.readouterr().err
    logged = scalars(run_dir)
    lengths = [v for _, v in logged["train/episode_length"]]
    segments = [v for _, v in logged["clips/segments"]]
    assert len(lengths) == len(segments) >= 1
    assert all(length > n for length, n in zip(lengths, segments))   # control steps, several per decision
    assert max(step for step, _ in logged["train/episode_length"]) <= 300 + max(lengths)
    (video,) = (run_dir / "videos").iterdir()   # drawn at the control rate, not once per decision
    import imageio.v3 as iio

    assert len(iio.imread(video)) >= 6   # every second control step of the first segment, at least
    capsys.readouterr()
    assert train.main(["--env", "humanoid", "--agent", "npmp-clips", "--steps", "10", "--logdir",
                       str(clips["root"] / "bad"), "--set", "clips=09_01-0,16_27-0",
                       "--set", f"clip_mocap={TURNS}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "09_01-0 in none" in err
    assert train.main(["--env", "humanoid", "--agent", "npmp-clips", "--steps", "10", "--logdir",
                       str(clips["root"] / "bad2"), "--set", f"primitives={clips['primitives']}",
                       "--set", f"clips={WALK}:20,{LEFT}", "--set", f"clip_mocap={clips['walks']},{TURNS}",
                       "--set", "blend=3", "--set", "high_level_obs=task,target"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "observation groups must be among" in err


@pytest.mark.slow
def test_the_benchmark_plays_a_learned_high_level_on_the_scripted_controllers_episodes(clips, capsys):
    """``--learned RUN``: the run's last policy, greedy, on the same seeded episodes as the scripted controllers
    (``--first-seed``), as long as the run chose among the same clips from the same start on the same primitives."""
    import train
    from benchmarks.npmp_clips_humanoid import main

    run_dir = clips["root"] / "learned"
    assert train.main(["--env", "humanoid", "--agent", "npmp-clips", "--steps", "200", "--logdir", str(run_dir),
                       "--set", f"primitives={clips['primitives']}", "--set", f"clips={WALK}:20,{LEFT},{RIGHT}",
                       "--set", f"clip_mocap={clips['walks']},{TURNS}", "--set", "blend=3",
                       "--set", "learning_starts=4", "--set", "batch_size=4", "--eval-every", "1000",
                       "--eval-episodes", "1", "--video-every", "0"]) == 0, capsys.readouterr().err
    results = clips["root"] / "learned.json"
    common = ["--mocap", str(clips["walks"]), str(TURNS), "--clips", f"{WALK}:20", LEFT, RIGHT, "--primitives",
              str(clips["primitives"]), "--start-frames", "20", "--blend", "3", "--episodes", "2", "--first-seed",
              "7", "--results", str(results)]
    assert main([*common, "--controllers", "learned", "toward", "away", "--learned", str(run_dir)]) == 0
    rows = json.loads(results.read_text())["primitives"][str(clips["primitives"])]
    (learned,) = [key for key in rows if key.startswith("learned ")]
    assert str(run_dir / "checkpoints") in learned   # kept per checkpoint: a later policy is measured again
    assert sorted(rows) == sorted([learned, "toward, blend 3", "away, blend 3"])
    for row in rows.values():
        assert sorted(row) == ["7", "8"] and all(e["steps"] > 0 and e["segments"] >= 1 for e in row.values())
    # the rules turn opposite ways from the same first place (episode 7's first choice)
    first = {key: rows[key]["7"]["chain"][1][0] for key in ("toward, blend 3", "away, blend 3")}
    assert first["toward, blend 3"] != first["away, blend 3"]
    capsys.readouterr()
    for bad, message in ((["--controllers", "learned"], "--learned RUN exactly when"),
                         (["--controllers", "walk", "--learned", str(run_dir)], "--learned RUN exactly when"),
                         (["--controllers", "learned", "--learned", str(clips["root"] / "none")], "no checkpoint"),
                         (["--controllers", "learned", "--learned", str(run_dir), "--blend", "0"], "pass --clips")):
        with pytest.raises(SystemExit) as exit_:
            main([*common, *bad])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_the_shipped_clip_primitives_drive_the_default_high_level_on_a_fresh_clone(tmp_path, capsys):
    """``--agent npmp-clips`` with no --set: the shipped clip primitives (taught the 16_27 turns and their chains,
    reading the chain 60 frames ahead), the turns from the shipped mocap, and a high level that sees the target, its
    last choice and where the clips it chose end; the run counts control steps and logs the targets reached."""
    import train
    from agents.npmp import CLIP_PRIMITIVES, NPMPClipsConfig
    from priors.npmp import load_primitives
    from tests.test_cli import scalars

    model, meta = load_primitives(CLIP_PRIMITIVES)
    assert meta["weights_dtype"] == "float16" and max(model.config.far_offsets) == 60
    # taught the six chains of the two turns (its last DAgger rounds were on the chains alone)
    assert {"pairE", "pairF", "pairG", "pairH", "pairI", "pairJ"} <= set(meta["clips"])
    config = NPMPClipsConfig()
    assert config.high_level_obs == "task,clip,plan" and config.exploration == "bootstrap"
    assert config.clips == f"{LEFT},{RIGHT}" and config.blend == 7
    run_dir = tmp_path / "run"
    assert train.main(["--env", "humanoid", "--agent", "npmp-clips", "--steps", "400", "--logdir", str(run_dir),
                       "--set", "learning_starts=2", "--eval-every", "1000", "--eval-episodes", "1",
                       "--video-every", "0"]) == 0, capsys.readouterr().err
    logged = scalars(run_dir)
    assert "task/targets_reached" in logged and len(logged["train/episode_length"]) >= 1
    assert min(v for _, v in logged["train/episode_length"]) > 20   # upright through the start and a turn


def test_the_reuse_benchmark_runs_the_clip_high_level_with_its_own_settings(tmp_path, capsys):
    """benchmarks/npmp.py ``npmp_clips``: DQN over the shipped clip primitives, its settings its own (not svg0's
    COMMON), the primitives' checksum kept with the run; a missing set is one error line."""
    from benchmarks import npmp as bench

    output = tmp_path / "npmp.json"
    common = ["--steps", "300", "--seeds", "0", "--workers", "1", "--conditions", "npmp_clips", "--workdir",
              str(tmp_path / "runs"), "--output", str(output), "--pipeline-dir", str(tmp_path)]
    assert bench.main([*common, "--greedy-episodes", "2"]) == 0
    result = json.loads(output.read_text())
    (run,) = result["runs"].values()
    assert run["primitives_sha256"] and result["reuse"]["npmp_clips"]["episodes_mean"] >= 1
    assert run["greedy"]["episodes"] == 2 and run["greedy"]["median_steps"] > 20   # the last policy, greedy
    assert result["reuse"]["npmp_clips"]["greedy_targets_per_episode"] == [run["greedy"]["targets_per_episode"]]
    config = json.loads((tmp_path / "runs" / "npmp_clips-seed0-steps300" / "config.json").read_text())
    assert "128" not in str(config["agent"]["hidden"])   # not COMMON's svg0 width
    # recorded without the greedy episodes now asked for, its directory gone (another machine): trained again
    shutil.rmtree(tmp_path / "runs")
    assert bench.main([*common, "--greedy-episodes", "3"]) == 0
    (again,) = json.loads(output.read_text())["runs"].values()
    assert again["greedy"]["episodes"] == 3 and (tmp_path / "runs" / "npmp_clips-seed0-steps300").is_dir()
    assert "run again" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        bench.main([*common, "--clip-primitives", str(tmp_path / "none")])
    assert exit_.value.code == 2 and "no primitives at" in capsys.readouterr().err


def test_the_kept_teachers_are_the_shaped_planner_s_runs_on_the_kept_chains(monkeypatch):
    """data/teachers (pipelines/npmp/recipes/clip_teachers_shaped.sh): one planned run per chain the clip primitives
    are taught and one per each of the ten other sequences, made with heading shaping, naming the kept chains as their
    mocap (a relative path: the recipe runs from the repository's root), each chain's motion the one planned on."""
    from envs.mocap.tracking import reference_playback
    from pipelines.npmp.data import plan_of, read_results, same_snippet

    monkeypatch.chdir(ROOT)
    chains = "data/mocap/cmu_turn_chains.h5"
    kept = {"data/teachers/clip_chains_shaped.h5": [f"pair{c}" for c in "EFGHIJ"],
            "data/teachers/clip_seqs_shaped.h5": [f"seq{s}" for s in ("LLLL", "LLRL", "LLRR", "LRLL", "LRRR", "RLLL",
                                                                      "RLRL", "RLRR", "RRLR", "RRRL")]}
    branched = {}
    for path, snippets in kept.items():
        runs, meta = read_results(path)
        assert [r["snippet"] for r in runs] == snippets
        assert meta["planner"]["root_orientation_weight"] == 0.2 and meta["lqr"]["follow_walker"] is True
        for run in runs:
            assert "bc" not in run and run["attrs"]["mocap"] == chains
            plan, _ = plan_of([path], run["snippet"], meta["planner"], chains)
            assert int(plan["stopped_at"]) == -1 and 160 <= len(plan["physics_states"]) <= 220   # to the chain's end
            branched[run["snippet"]] = run["attrs"].get("branch")
    # the branch points whose laws do not fork (docs/npmp.md, "Where the teachers' laws fall")
    assert branched["pairF"] == "pairE@8" and branched["pairI"] == "pairG@105" and branched["seqLLRL"] == "pairJ@80"
    assert branched["pairH"] == "pairE@92" and branched["seqRRLR"] == "pairG@130"
    assert same_snippet(chains, chains, "pairE") and not same_snippet(chains, TURNS, "pairE")
    # the chains one turn longer (pipelines/npmp/recipes/clip_teachers_five.sh): on their own mocap file, each
    # branched from its four-turn parent's kept run, and every run to its chain's end
    five = "data/mocap/cmu_turn_chains5.h5"

    def children(path: str) -> tuple[list[dict], dict]:
        runs, meta = read_results(path)
        for run in runs:
            parent, _, frame = run["attrs"]["branch"].partition("@")
            assert run["attrs"]["mocap"] == five and parent in branched and "bc" not in run
            plan, _ = plan_of([path], run["snippet"], meta["planner"], five)
            assert int(plan["branched_at"]) == int(frame) and int(plan["stopped_at"]) == -1
            assert len(plan["physics_states"]) == len(reference_playback(run["snippet"], 0, five).states)
        return runs, meta

    runs, meta = children("data/teachers/clip_seqs5_shaped.h5")
    assert len(runs) == 18 and meta["planner"]["root_orientation_weight"] == 0.2
    assert {r["snippet"]: r["attrs"]["branch"] for r in runs}["seqLLLRL"] == "pairJ@120"
    # the same children planned from 46 frames before they part, following the walker
    # (pipelines/npmp/recipes/clip_teachers_tail.sh): the 14 whose run reached its chain's end
    runs, meta = children("data/teachers/clip_tail.h5")
    assert len(runs) == 14 and meta["planner"]["follow_walker"] is True


def test_a_plan_that_sinks_below_the_reference_is_measured_in_metres_and_frames():
    """npmp_heading --plans: a run whose pelvis drops 0.5 m below the reference's over its last frames (a crouch
    the head-height fall line does not see) is reported as such; one that rises above it sinks by nothing."""
    from benchmarks.npmp_heading import sinking

    reference = np.full(10, 1.1)
    crouched = np.r_[np.full(6, 1.05), np.full(4, 0.6)]
    assert sinking(crouched, reference) == {"root_below_reference_max_m": 0.5, "root_below_at_frame": 6,
                                            "frames_root_below_0.3m": 4}
    assert sinking(reference + 0.1, reference[:8])["frames_root_below_0.3m"] == 0


def test_a_plan_that_loses_the_pace_is_measured_against_the_reference_s_ground_speed():
    """npmp_heading --plans: a run that walks the reference's path at full speed, then at half over its last frames,
    keeps 5/8 of the pace overall and half over the tail, and ends 1.8 m behind; the first frame whose tracking
    error passes the termination threshold is where the planner went blind."""
    from benchmarks.npmp_heading import blind_from, pace

    reference = np.stack([np.arange(0, 81, dtype=float) * 0.06, np.zeros(81)], axis=1)   # 1.8 m/s at 0.03 s
    steps = np.r_[np.full(20, 0.06), np.full(60, 0.03)]
    walked = np.stack([np.r_[0.0, np.cumsum(steps)], np.zeros(81)], axis=1)
    assert pace(walked, reference, tail=60) == {"speed_ratio": 0.625, "speed_ratio_last_60": 0.5,
                                                "root_off_reference_at_end_m": 1.8}
    assert pace(reference, reference)["speed_ratio"] == 1.0
    with pytest.raises(ValueError):
        pace(walked[:1], reference)
    assert blind_from(np.array([0.1, 0.29, 0.31, 0.2, 0.5])) == {"first_frame_over_termination_error": 2,
                                                                 "frames_over_termination_error": 2}
    assert blind_from(np.zeros(3))["first_frame_over_termination_error"] is None


def test_a_chain_written_with_one_more_turn_extends_the_reference_a_student_reads(tmp_path):
    """distill --reference-mocap: the same chain written again with one more turn goes on from the chain's own frames
    (equal up to the blend before the added join), so the far states near its end show the walk going on; a chain
    that is not a continuation of the data's is one clear error."""
    from agents.config import ConfigError
    from envs.mocap.tracking import reference_playback
    from pipelines.npmp.__main__ import main as npmp_main
    from pipelines.npmp.data import reference_extension

    short, longer = tmp_path / "short.h5", tmp_path / "longer.h5"
    for out, extra in ((short, ""), (longer, f",{LEFT}")):
        specs = [f"a={LEFT}:20,{RIGHT},{LEFT}{extra}", f"b={LEFT}:20,{LEFT},{RIGHT}{extra}"]
        assert npmp_main(["chain", "--blend", "7", "--mocap", str(TURNS), "--out", str(out),
                          *(arg for spec in specs for arg in ("--chain", spec))]) == 0
    own = reference_playback("a", 0, str(short))
    extended = reference_extension("a", own, longer)
    assert len(extended.states) > len(own.states) + 20
    np.testing.assert_allclose(extended.states[:len(own.states) - 8], own.states[:-8], atol=1e-4)
    with pytest.raises(ConfigError, match="does not go on from the data's"):
        reference_extension("a", reference_playback("b", 0, str(short)), longer)
    with pytest.raises(ConfigError, match="no reference of c"):
        reference_extension("c", own, longer)


def test_a_kept_run_is_continued_with_other_planner_settings_only_when_asked():
    """collect --branch-across-settings: a branch may continue a kept run planned before a setting was added (or with
    another value of it); without the flag that is the one settings error, with it the parent's run is taken as it is
    and its own settings travel with it (``branch_planner``). Runs kept before ``follow_walker`` existed read as
    planned with it off."""
    import dataclasses

    from agents.config import ConfigError
    from agents.mpc import MPCConfig
    from pipelines.npmp import data

    kept = ROOT / "data" / "teachers" / "clip_chains_shaped.h5"
    chains = ROOT / "data" / "mocap" / "cmu_turn_chains.h5"
    assert data.read_meta(kept)["planner"]["follow_walker"] is False
    old = dataclasses.asdict(MPCConfig(threads=1, root_orientation_weight=0.2))
    new = dataclasses.asdict(MPCConfig(threads=1, root_orientation_weight=0.2, follow_walker=True))

    def job(settings, across):
        return data.CollectJob("pairE", "mpc", "unused.h5", 0, 1, 0.03, 1, settings, {}, {}, str(chains),
                               (str(kept),), None, ("pairH", 92), across)

    assert "parent_settings" not in data.parent_run(job(old, False), "pairH", 92)   # the same settings: as before
    with pytest.raises(ConfigError, match="other settings"):
        data.parent_run(job(new, False), "pairH", 92)
    plan = data.parent_run(job(new, True), "pairH", 92)
    assert plan["parent_settings"] == data.read_meta(kept)["planner"] and len(plan["commands"]) > 92


def test_the_teachers_planned_again_continue_their_kept_runs_with_the_planner_that_follows_the_walker():
    """data/teachers/clip_paced.h5: each of the ten runs planned again from before its planner went blind is the kept
    run (its own or a sibling's) up to its branch point, then planned with ``follow_walker``; the prefix's own
    settings travel with it."""
    import json as _json

    from agents.mpc import stored_settings
    from pipelines.npmp.data import read_results

    runs, meta = read_results("data/teachers/clip_paced.h5")
    assert meta["planner"]["follow_walker"] is True
    kept = {r["snippet"]: r for path in ("data/teachers/clip_chains_shaped.h5", "data/teachers/clip_seqs_shaped.h5")
            for r in read_results(path)[0]}
    assert sorted(r["snippet"] for r in runs) == ["pairE", "pairF", "pairG", "pairI", "seqLRRR", "seqRLLL", "seqRLRL",
                                                  "seqRLRR", "seqRRLR", "seqRRRL"]
    for run in runs:
        parent, frame = str(run["attrs"]["branch"]).split("@")
        assert stored_settings(_json.loads(run["attrs"]["branch_planner"]))["follow_walker"] is False
        np.testing.assert_array_equal(run["plan"]["commands"][:int(frame)],
                                      kept[parent]["plan"]["commands"][:int(frame)])
        n = min(len(run["plan"]["commands"]), len(kept[run["snippet"]]["plan"]["commands"]))
        assert not np.array_equal(run["plan"]["commands"][int(frame):n],
                                  kept[run["snippet"]]["plan"]["commands"][int(frame):n])   # planned on anew
