"""The NPMP pipeline end to end at toy scale (issue #6): two real tracking experts trained on Ray (one distilled, one
held out), noisy-rollout and LFPC data, a tiny NPMP distilled by BC and by LFPC, one-shot imitation and latent
optimisation, then ``train.py --env humanoid --agent npmp`` on the resulting primitives file."""
import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from pipelines.npmp.data import NPMPDataset, read_laws, read_results
from pipelines.npmp.weights import action_weights, read_law_weights
from priors.npmp import load_primitives
from pipelines.npmp.__main__ import main as npmp_main
from tests.conftest import ROOT

TRAIN, HELD_OUT = "09_06-0", "09_05-0"
TINY_EXPERT = ["--set", "hidden=16,16", "--set", "learning_starts=40", "--set", "batch_size=4",
               "--set", "sequence_length=4", "--set", "eval_episodes=1", "--set", "eval_every=100000"]
TINY_MODEL = ["--latent-dim", "4", "--encoder-hidden", "16", "--decoder-hidden", "16,16", "--batch", "4",
              "--distill-steps", "20"]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    work = tmp_path_factory.mktemp("npmp")
    common = ["--experts-root", str(work / "experts"), "--snippets", TRAIN, "--held-out", HELD_OUT,
              "--data", str(work / "data.h5"), "--num-cpus", "2"]
    code = npmp_main(["all", *common, "--steps", "120", *TINY_EXPERT, "--trajectories", "2",
                      "--perturbation-trajectories", "1", *TINY_MODEL, "--out", str(work / "primitives"),
                      "--report", str(work / "report.json")])
    assert code == 0
    return work, common


@pytest.mark.slow
def test_all_stages_write_experts_data_primitives_and_report(pipeline):
    work, _ = pipeline
    assert (work / "experts" / TRAIN / "config.json").is_file() and (work / "experts" / HELD_OUT).is_dir()
    model, meta = load_primitives(work / "primitives")
    assert model.config.latent_dim == 4 and model.config.beta == 0.1
    assert meta["clips"] == [TRAIN] and meta["held_out"] == [HELD_OUT] and meta["steps"] == 20
    assert set(meta["evaluation"]) == {"train", "held_out"}
    report = json.loads((work / "report.json").read_text())
    for split, snippet in (("train", TRAIN), ("held_out", HELD_OUT)):
        clip = report[split]["clips"][0]
        assert clip["snippet"] == snippet
        if "skipped" not in clip:   # an expert that falls within K steps leaves nothing to encode
            assert clip["one_shot_steps"] >= 1 and clip["expert_return"] > 0
            assert clip["latent_opt_action_mse"][1] <= clip["latent_opt_action_mse"][0]
        absolute = report[split]["absolute"][0]   # imitation of the clip itself, in absolute terms
        assert absolute["snippet"] == snippet and 1 <= absolute["steps"] <= absolute["full_steps"]
        assert absolute["feed_forward_steps"] >= 1 and absolute["reward_per_step"] >= 0


def test_lfpc_distillation_and_bad_input(pipeline, capsys):
    work, common = pipeline
    assert npmp_main(["distill", *common, *TINY_MODEL, "--scheme", "lfpc", "--beta", "0.001",
                      "--out", str(work / "lfpc")]) == 0
    model, meta = load_primitives(work / "lfpc")
    assert meta["distill"]["scheme"] == "lfpc" and model.config.beta == 0.001
    assert npmp_main(["distill", *common[:-2], "--data", str(work / "missing.h5"), "--out", str(work / "x")]) == 2
    assert "no NPMP data" in capsys.readouterr().err
    assert npmp_main(["evaluate", *common, "--primitives", str(work / "missing")]) == 2
    assert "no NPMP primitives" in capsys.readouterr().err
    # a second distillation into a directory another process is distilling into: one line, nothing replaced
    from agents.runlock import RunLock

    before = (work / "lfpc" / "weights.safetensors").read_bytes()
    with RunLock(work / "lfpc", lock_file=work / ".lfpc.lock"):
        assert npmp_main(["distill", *common, *TINY_MODEL, "--out", str(work / "lfpc")]) == 2
    assert "in use by another process" in capsys.readouterr().err
    assert (work / "lfpc" / "weights.safetensors").read_bytes() == before


@pytest.mark.slow
def test_npmp_agent_trains_on_the_pipeline_primitives(pipeline):
    work, _ = pipeline
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "--env", "humanoid", "--agent", "npmp", "--steps", "120",
         "--set", f"primitives={work / 'primitives'}", "--set", "learning_starts=40", "--set", "hidden=16,16",
         "--set", "batch_size=4", "--eval-episodes", "1", "--logdir", str(work / "reuse")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (work / "reuse" / "checkpoints").is_dir()


@pytest.mark.slow   # about 2 minutes on 2 cores (a Ray cluster, 2 planned rollouts, 2 distillations)
def test_mpc_experts_collect_distill_and_evaluate_without_any_training(tmp_path, capsys):
    """MPC experts need no runs: collect plans on the snippets, distill takes the split the data was collected
    with, and evaluate works with no experts directory (as on a fresh clone)."""
    data, out, none = tmp_path / "data.h5", tmp_path / "primitives", tmp_path / "no-experts"
    planner = [arg for pair in ("horizon=4", "knots=1", "candidates=4", "iterations=1", "method=ps")
               for arg in ("--planner-set", pair)]
    assert npmp_main(["collect", "--experts", "mpc", "--snippets", TRAIN, "--held-out", HELD_OUT, "--data", str(data),
                      "--num-cpus", "2", "--trajectories", "1", "--perturbation-trajectories", "1", *planner]) == 0
    assert npmp_main(["distill", "--data", str(data), *TINY_MODEL, "--out", str(out)]) == 0
    model, meta = load_primitives(out)
    assert meta["clips"] == [TRAIN] and meta["held_out"] == [HELD_OUT]
    assert model.config.lookahead_source == "reference"   # the default for planner data
    assert npmp_main(["evaluate", "--primitives", str(out), "--experts-root", str(none), "--data", str(data),
                      "--out", str(tmp_path / "report.json")]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["snippet"] for r in report["held_out"]["absolute"]] == [HELD_OUT]
    # the planner's nominal trajectories in the data stand in for expert runs; held-out clips were never planned
    assert [r["snippet"] for r in report["train"]["clips"]] == [TRAIN] and "clips" not in report["held_out"]
    # the planner's feedback law gives LFPC its Jacobians
    assert npmp_main(["distill", "--data", str(data), *TINY_MODEL, "--scheme", "lfpc", "--out", str(tmp_path / "x")]) == 0
    assert npmp_main(["collect", "--experts", "mpc", "--snippets", "no_such_snippet", "--data", str(data)]) == 2
    # no perturbation rollouts: refused before any rollout (each part estimates Delta from them)
    capsys.readouterr()
    zero = tmp_path / "zero.h5"
    assert npmp_main(["collect", "--experts", "mpc", "--snippets", TRAIN, "--data", str(zero), "--trajectories", "2",
                      "--perturbation-trajectories", "0", "--processes", "1", *planner]) == 2
    assert "--perturbation-trajectories" in capsys.readouterr().err and not zero.with_suffix(".parts").exists()
    # DAgger: the primitives drive, the planner labels; the data gains their episodes, the old file is kept
    relabelled = tmp_path / "dagger.h5"
    assert npmp_main(["relabel", "--data", str(data), "--primitives", str(out), "--out", str(relabelled),
                      "--trajectories", "2", "--processes", "1"]) == 0
    before, after = NPMPDataset(data), NPMPDataset(relabelled)
    assert after.meta["relabelled"][0]["trajectories"] == 2 and after.meta["planner"] == before.meta["planner"]
    assert len(after.bc.lengths) == len(before.bc.lengths) + 2 and after.bc.lengths[-2:].min() > 0
    assert torch.equal(after.delta_std, before.delta_std)
    assert npmp_main(["relabel", "--data", str(data), "--primitives", str(out), "--out", str(data)]) == 2
    assert npmp_main(["distill", "--data", str(relabelled), *TINY_MODEL, "--out", str(tmp_path / "y")]) == 0



@pytest.mark.slow
def test_lqr_experts_label_with_the_feedback_law_around_the_planners_run(tmp_path, capsys):
    """--expert-policy lqr: the planner runs once per snippet; the noise-free rollout of its LQR law is the
    planner's own run, and every noisy rollout's labels are the law's commands at the visited states."""
    from agents.lqr import LQRConfig
    from pipelines.npmp.data import planner_expert, rollout

    data = tmp_path / "data.h5"
    planner = [arg for pair in ("horizon=4", "knots=1", "candidates=4", "iterations=1", "method=ps")
               for arg in ("--planner-set", pair)]
    assert npmp_main(["collect", "--experts", "mpc", "--expert-policy", "lqr", "--lqr-set", "control_weight=2",
                      "--snippets", TRAIN, "--held-out", HELD_OUT, "--data", str(data), "--processes", "1",
                      "--trajectories", "2", "--perturbation-trajectories", "1", *planner]) == 0
    dataset = NPMPDataset(data)
    assert dataset.meta["lqr"] == {**LQRConfig().__dict__, "control_weight": 2.0}
    assert "jacobians" not in dataset.nominal.data   # gains on the simulator state: no LFPC Jacobians
    expert = planner_expert(TRAIN, dataset.meta["planner"], dataset.meta["lqr"])
    env = expert.make_env(0)
    try:
        nominal = rollout(expert, env, 0.0, np.random.default_rng(0))
        noisy = rollout(expert, env, 0.1, np.random.default_rng(1))
    finally:
        env.close()
    np.testing.assert_allclose(nominal["mean_actions"], expert.tracker.commands[:len(nominal["mean_actions"])],
                               atol=1e-6)
    assert not np.allclose(noisy["mean_actions"][5:10], expert.tracker.commands[5:10], atol=1e-3)  # feedback acts
    # relabelling reads the law from the data; the primitives' episodes are labelled by it
    primitives, relabelled = tmp_path / "primitives", tmp_path / "dagger.h5"
    assert npmp_main(["distill", "--data", str(data), *TINY_MODEL, "--out", str(primitives)]) == 0
    assert npmp_main(["relabel", "--data", str(data), "--primitives", str(primitives), "--out", str(relabelled),
                      "--trajectories", "1", "--processes", "1"]) == 0
    assert NPMPDataset(relabelled).meta["lqr"] == dataset.meta["lqr"]
    # the law's Hessians weigh the distillation's action error: read from the law the relabelling rebuilt, and
    # they hold for the relabelled data too (the same planner run)
    weights = tmp_path / "weights.h5"
    assert npmp_main(["law-weights", "--data", str(data), "--out", str(weights), "--processes", "1"]) == 0
    (W,) = read_law_weights(weights, relabelled, [TRAIN]).values()
    assert W.shape == (len(expert.tracker.commands), 56, 56)
    np.testing.assert_allclose(W, action_weights(expert.tracker.action_hessians), atol=1e-5)
    assert npmp_main(["distill", "--data", str(relabelled), "--action-weights", str(weights), "--snippets", TRAIN,
                      *TINY_MODEL, "--distill-steps", "2", "--out", str(tmp_path / "weighed")]) == 0
    assert load_primitives(tmp_path / "weighed")[1]["action_weights"].endswith("weights.h5")
    capsys.readouterr()
    assert npmp_main(["distill", "--data", str(data), "--action-weights", str(weights), "--scheme", "lfpc",
                      "--out", str(tmp_path / "lfpc")]) == 2
    assert "--scheme bc" in capsys.readouterr().err
    # the same round with pushes on the walker's root: recorded with the round, and the episode is another one
    pushed = tmp_path / "pushed.h5"
    assert npmp_main(["relabel", "--data", str(data), "--primitives", str(primitives), "--out", str(pushed),
                      "--trajectories", "1", "--processes", "1", "--pushes", "0.1", "0.06", "0.3"]) == 0
    assert NPMPDataset(pushed).meta["relabelled"][-1]["pushes"] == {"push_every": 0.1, "push_duration": 0.06,
                                                                    "push_scale": 0.3}
    episode = lambda path: NPMPDataset(path).trajectory(TRAIN, "bc", 2)["states"]   # after the 2 collected
    calm, shoved = episode(relabelled), episode(pushed)
    n = min(len(calm), len(shoved))
    assert not np.allclose(calm[:n], shoved[:n])
    # or the law drives its own pushed episodes, appended like a round's: its labels are its executed commands
    # less the noise, and no primitives are needed
    shown = tmp_path / "shown.h5"
    assert npmp_main(["relabel", "--data", str(data), "--primitives", str(tmp_path / "none"), "--out", str(shown),
                      "--trajectories", "1", "--processes", "1", "--action-noise", "0", "--driver", "labeller",
                      "--pushes", "0.1", "0.06", "0.3"]) == 0
    round_meta = NPMPDataset(shown).meta["relabelled"][-1]
    assert round_meta["driver"] == "labeller" and round_meta["primitives"] is None
    own = NPMPDataset(shown).trajectory(TRAIN, "bc", 2)
    np.testing.assert_allclose(own["actions"], np.clip(own["mean_actions"], -1, 1), atol=1e-6)
    capsys.readouterr()
    assert npmp_main(["relabel", "--data", str(data), "--out", str(tmp_path / "bad.h5"), "--driver", "labeller",
                      "--labeller", "planner"]) == 2
    assert "--driver labeller needs --labeller collected" in capsys.readouterr().err
    # or both drive (DAgger's mixture): each executed command is the share of the label plus the rest of what the
    # primitives command at that state, replayed here through a fresh actor over the episode's states
    blended = tmp_path / "blended.h5"
    assert npmp_main(["relabel", "--data", str(data), "--primitives", str(primitives), "--out", str(blended),
                      "--trajectories", "1", "--processes", "1", "--action-noise", "0", "--driver", "mixed",
                      "--labeller-share", "0.25"]) == 0
    round_meta = NPMPDataset(blended).meta["relabelled"][-1]
    assert round_meta["driver"] == "mixed" and round_meta["labeller_share"] == 0.25
    mixed = NPMPDataset(blended).trajectory(TRAIN, "bc", 2)
    from pipelines.npmp.evaluate import primitives_actor
    actor = primitives_actor(load_primitives(primitives)[0], TRAIN)
    student = np.stack([actor(t, s) for t, s in enumerate(mixed["states"][:-1])])
    np.testing.assert_allclose(mixed["actions"], 0.25 * mixed["mean_actions"] + 0.75 * student, atol=1e-5)
    assert np.abs(mixed["actions"] - mixed["mean_actions"]).max() > 1e-3   # the primitives did take part
    for bad, message in ((["--driver", "mixed"], "--labeller-share in (0, 1)"),
                         (["--driver", "mixed", "--labeller-share", "1"], "--labeller-share in (0, 1)"),
                         (["--labeller-share", "0.5"], "--labeller-share needs --driver mixed")):
        capsys.readouterr()
        assert npmp_main(["relabel", "--data", str(data), "--out", str(tmp_path / "bad.h5"), *bad]) == 2
        assert message in capsys.readouterr().err
    # a DAgger round continues from the primitives: their normalisation kept, their own training recorded
    continued = tmp_path / "continued"
    assert npmp_main(["distill", "--data", str(relabelled), "--init", str(primitives), "--distill-steps", "2",
                      "--batch", "4", "--lr-schedule", "cosine", "--windows", "snippets", "--out", str(continued)]) == 0
    (first, first_meta), (second, second_meta) = load_primitives(primitives), load_primitives(continued)
    assert torch.equal(first.state_shift, second.state_shift) and second.config == first.config
    assert second_meta["continued_from"]["distill"] == first_meta["distill"] and second_meta["distill"]["steps"] == 2
    assert second_meta["distill"]["lr_schedule"] == "cosine" and first_meta["distill"]["lr_schedule"] == "constant"
    assert second_meta["distill"]["windows"] == "snippets" and first_meta["distill"]["windows"] == "steps"
    assert second_meta["continued_from"]["data"] == first_meta["data"] and second_meta["data"].endswith("dagger.h5")
    # continuing takes the primitives' own beta unless told another: then the same networks under the new one
    assert npmp_main(["distill", "--data", str(relabelled), "--init", str(primitives), "--beta", "0.01",
                      "--distill-steps", "1", "--batch", "4", "--out", str(tmp_path / "other-beta")]) == 0
    other_beta, other_meta = load_primitives(tmp_path / "other-beta")
    assert other_beta.config == dataclasses.replace(first.config, beta=0.01) and other_meta["beta"] == 0.01
    assert other_meta["beta_changed"] == [0.1, 0.01]
    capsys.readouterr()
    assert npmp_main(["distill", "--data", str(relabelled), "--init", str(primitives), "--beta", "-1",
                      "--distill-steps", "2", "--batch", "4", "--out", str(tmp_path / "bad-beta")]) == 2
    assert "--beta must be >= 0" in capsys.readouterr().err and not (tmp_path / "bad-beta").exists()
    # collections of other snippets made elsewhere (another seed) merge into one; the same snippet twice, or
    # data collected with other settings, is one clear error
    other, merged = tmp_path / "other.h5", tmp_path / "merged.h5"
    assert npmp_main(["collect", "--experts", "mpc", "--expert-policy", "lqr", "--lqr-set", "control_weight=2",
                      "--snippets", "16_35-0", "--held-out", HELD_OUT, "--data", str(other), "--processes", "1",
                      "--trajectories", "2", "--perturbation-trajectories", "1", "--seed", "7", *planner]) == 0
    assert npmp_main(["merge", str(data), str(other), "--out", str(merged)]) == 0
    both = NPMPDataset(merged)
    assert [r["snippet"] for r in read_results(merged)[0]] == [TRAIN, "16_35-0"]
    assert [m["seed"] for m in both.meta["merged_from"]] == [0, 7] and both.meta["lqr"] == dataset.meta["lqr"]
    assert len(both.bc.lengths) == len(dataset.bc.lengths) + len(NPMPDataset(other).bc.lengths)
    capsys.readouterr()
    assert npmp_main(["merge", str(data), str(data), "--out", str(tmp_path / "twice.h5")]) == 2
    assert f"{TRAIN} is in both" in capsys.readouterr().err
    assert npmp_main(["merge", str(other), str(relabelled), "--out", str(tmp_path / "mixed.h5")]) == 2
    assert "differ in relabelled" in capsys.readouterr().err and not (tmp_path / "mixed.h5").exists()
    # ... unless asked to: a new snippet's collection joins a file after its DAgger rounds (same labeller), and the
    # next round relabels both
    assert npmp_main(["merge", str(other), str(relabelled), "--out", str(tmp_path / "mixed.h5"),
                      "--mixed-rounds"]) == 0
    mixed = NPMPDataset(tmp_path / "mixed.h5")
    assert "relabelled" not in mixed.meta and mixed.meta["lqr"] == dataset.meta["lqr"]
    assert [len(m.get("relabelled", [])) for m in mixed.meta["merged_from"]] == [0, 1]
    assert npmp_main(["relabel", "--data", str(tmp_path / "mixed.h5"), "--primitives", str(primitives), "--out",
                      str(tmp_path / "mixed_d1.h5"), "--snippets", TRAIN, "16_35-0", "--trajectories", "1",
                      "--processes", "1"]) == 0
    assert len(NPMPDataset(tmp_path / "mixed_d1.h5").bc.lengths) == len(mixed.bc.lengths) + 2
    # collections labelled by laws with other settings (periodic laws on looped walks, time-indexed ones on arcs)
    # merge only when asked to; each snippet keeps its own law, and a round relabels each with its own
    other_law, laws = tmp_path / "other_law.h5", tmp_path / "laws.h5"
    assert npmp_main(["collect", "--experts", "mpc", "--expert-policy", "lqr", "--lqr-set", "control_weight=3",
                      "--snippets", "16_35-0", "--held-out", HELD_OUT, "--data", str(other_law), "--processes", "1",
                      "--trajectories", "2", "--perturbation-trajectories", "1", "--seed", "7", *planner]) == 0
    capsys.readouterr()
    assert npmp_main(["merge", str(data), str(other_law), "--out", str(laws)]) == 2
    assert "differ in lqr" in capsys.readouterr().err and not laws.exists()
    assert npmp_main(["merge", str(data), str(other_law), "--out", str(laws), "--mixed-laws"]) == 0
    own = {TRAIN: dataset.meta["lqr"], "16_35-0": {**dataset.meta["lqr"], "control_weight": 3.0}}
    assert read_laws(laws) == own and "lqr" not in NPMPDataset(laws).meta
    assert npmp_main(["relabel", "--data", str(laws), "--primitives", str(primitives), "--out",
                      str(tmp_path / "laws_d1.h5"), "--snippets", TRAIN, "16_35-0", "--trajectories", "1",
                      "--processes", "1", "--lqr-set", "fd_epsilon=1e-5"]) == 0
    round_meta = NPMPDataset(tmp_path / "laws_d1.h5").meta["relabelled"][-1]
    assert round_meta["lqr"] == {s: {**law, "fd_epsilon": 1e-5} for s, law in own.items()}
    assert read_laws(tmp_path / "laws_d1.h5") == own   # the next round starts from each snippet's law again
    capsys.readouterr()
    assert npmp_main(["collect", "--expert-policy", "lqr", "--snippets", TRAIN, "--data", str(tmp_path / "x.h5")]) == 2
    assert "needs --experts mpc" in capsys.readouterr().err


def test_the_laws_falls_are_placed_against_the_chain_s_joins():
    """``npmp_tube.py --laws``: the steps at which a law's noisy rollouts fell, and each one's offset from the
    nearest join of the chain (negative: before it)."""
    from benchmarks.npmp_tube import law_endings

    class Rollouts:   # three rollouts of a 50-step chain joined at 20 and 40: falls at 17 and 44, one to the end
        attrs = {"c": {"trajectories": 3}}

        def trajectory(self, snippet, kind, i):
            return {"actions": np.zeros((50 if kind == "nominal" else (17, 50, 44)[i], 1))}

    assert law_endings(Rollouts(), "c", joins=[20, 40]) == {"frames": 50, "rollouts": 3, "to_the_end": 1,
                                                           "median_steps": 44.0, "falls": [17, 44],
                                                           "joins": [20, 40], "falls_from_join": [-3, 4]}
    assert "joins" not in law_endings(Rollouts(), "c")


def test_the_drift_by_observation_group_tells_the_rounds_episodes_from_the_law_s():
    """``npmp_tube.py --groups``: per observation group and bin, the median distance from the law's run of the law's
    rollouts and of the DAgger episodes; an episode that drifts in one group's dimensions only drifts there."""
    from benchmarks.npmp_tube import group_drift

    rng = np.random.default_rng(0)
    nominal = rng.normal(size=(21, 4))
    law = [nominal + 0.05 * rng.normal(size=nominal.shape) for _ in range(2)]
    drifting = nominal.copy()
    drifting[:, 2:] += np.linspace(0, 1, 21)[:, None]   # the second group drifts away, the first stays on the run
    drifting = drifting[:15]                             # and the episode ends early (a fall)

    class Data:   # two law rollouts, then one DAgger episode
        attrs = {"c": {"trajectories": 2}}

        def trajectory(self, snippet, kind, i):
            return {"states": nominal if kind == "nominal" else [*law, drifting][i]}

        def bc_trajectories(self, snippet):
            return 3

    drift = group_drift(Data(), ["c"], {"a": slice(0, 2), "b": slice(2, 4)}, every=5)
    assert drift["episodes"] == {"law": 2, "rounds": 1} and drift["every"] == 5
    assert len(drift["law"]["a"]) == 5 and len(drift["rounds"]["a"]) == 3   # 21 frames; the episode's 15
    assert drift["rounds"]["a"] == [0.0, 0.0, 0.0]
    assert drift["rounds"]["b"] == sorted(drift["rounds"]["b"]) and drift["rounds"]["b"][-1] > 5 * drift["law"]["b"][2]


def test_pushes_act_on_the_walker_s_root_only_while_they_last(capsys):
    """``relabel --pushes``: a force on the walker's root body during the steps a push lasts, none between; the
    same draws give the same pushes; a bad schedule is one clear error."""
    import envs
    from envs.mocap import tracking
    from pipelines.npmp.data import ConfigError, pushed_steps, pushes_model

    env = envs.make(f"{tracking.TIMED_FAMILY}:{TRAIN}", seed=0)
    env.reset(seed=0)
    applied = env.unwrapped.physics.data.xfrc_applied
    pushes = {"push_every": 0.09, "push_duration": 0.06, "push_scale": 0.5}   # control steps of 0.03 s
    push = pushed_steps(env, pushes, np.random.default_rng(0))
    seen = []
    for t in range(8):
        push(t)
        seen.append(applied[1, :3].copy())
        assert not applied[2:].any() and not applied[1, 3:].any()   # the root alone, no torque
    moving = [bool(np.any(f)) for f in seen]
    assert moving == [False, False, False, True, True, False, True, True]   # from 0.09 s, for 2 steps, twice
    weight = 70.0 * 9.81
    assert 0.05 * weight < np.abs(seen[3]).max() < 5 * weight and np.array_equal(seen[3], seen[4])
    again = pushed_steps(env, pushes, np.random.default_rng(0))
    again(3)
    np.testing.assert_array_equal(applied[1, :3], seen[3])
    env.close()
    for bad in ({**pushes, "push_duration": 0.2}, {**pushes, "push_scale": -1.0}):
        with pytest.raises(ConfigError, match="pushes"):
            pushes_model(bad)


@pytest.mark.slow   # about 2.5 minutes alone: collect, distil, evaluate and four relabelling rounds (make test-slow)
def test_collections_from_another_mocap_file_keep_their_reference_through_distil_and_relabel(tmp_path, capsys):
    """collect --mocap: snippets of a mocap file that is not the shipped one (a walk looped past its clip's end) are
    collected, distilled with the reference look-ahead, and relabelled from that file, which the data names; such a
    collection merges with one of shipped snippets made with other planner settings only when asked to."""
    from envs.mocap import convert
    from envs.mocap.tracking import snippet_frames

    mocap, looped = tmp_path / "looped.h5", "07_01-0-loop4"
    assert convert.main(["--clips", "07_01", "--loop", "4", "--loop-clips", "07_01", "--output", str(mocap)]) == 0
    planner = [arg for pair in ("horizon=4", "knots=1", "candidates=4", "iterations=1", "method=ps")
               for arg in ("--planner-set", pair)]
    common = ["collect", "--experts", "mpc", "--expert-policy", "lqr", "--held-out", HELD_OUT, "--processes", "1",
              "--trajectories", "1", "--perturbation-trajectories", "1", *planner]
    data = tmp_path / "looped_data.h5"
    capsys.readouterr()   # a looped snippet is unknown to the shipped file: one clear error, nothing written
    assert npmp_main([*common, "--snippets", looped, "--data", str(data)]) == 2
    assert "unknown snippet" in capsys.readouterr().err and not data.exists()
    assert npmp_main([*common, "--snippets", looped, "--mocap", str(mocap), "--data", str(data)]) == 0
    (result,), _ = read_results(data)
    assert result["attrs"]["mocap"] == str(mocap) and snippet_frames(looped, mocap) == 134
    dataset = NPMPDataset(data, lookahead_source="reference")   # the reference is the looped clip's
    from pipelines.npmp.evaluate import Reference, reference_playback, reference_states

    np.testing.assert_array_equal(dataset.reference.numpy(), reference_states(looped, ref_path=mocap))
    assert len(dataset.reference) > snippet_frames("07_01-0") + 40   # 4 s of walking, not the 2.6 s clip
    primitives, relabelled = tmp_path / "primitives", tmp_path / "dagger.h5"
    assert npmp_main(["distill", "--data", str(data), *TINY_MODEL, "--out", str(primitives)]) == 0
    assert load_primitives(primitives)[1]["mocap"] == {looped: str(mocap)}   # evaluate reads the clip there
    report = tmp_path / "report.json"
    assert npmp_main(["evaluate", "--primitives", str(primitives), "--data", str(data), "--latent-iterations", "1",
                      "--out", str(report), "--no-write-meta"]) == 0
    (row,) = json.loads(report.read_text())["train"]["absolute"]
    assert row["snippet"] == looped and row["full_steps"] == len(dataset.reference) - 1
    assert npmp_main(["relabel", "--data", str(data), "--primitives", str(primitives), "--out", str(relabelled),
                      "--trajectories", "1", "--processes", "1"]) == 0
    assert read_results(relabelled)[0][0]["attrs"]["relabelled_trajectories"] == 1
    # a DAgger round labelled by the planner itself (not the LQR law the data was collected with)
    planned = tmp_path / "dagger_planned.h5"
    assert npmp_main(["relabel", "--data", str(data), "--primitives", str(primitives), "--out", str(planned),
                      "--trajectories", "1", "--processes", "1", "--labeller", "planner", *planner]) == 0
    after = NPMPDataset(planned)
    (round_meta,) = after.meta["relabelled"]
    assert round_meta["labeller"] == "planner" and round_meta["planner"]["horizon"] == 4
    assert round_meta["snippets"] == [looped] and after.bc_trajectories(looped) == dataset.bc_trajectories(looped) + 1
    dagger = after.trajectory(looped, "bc", after.bc_trajectories(looped) - 1)   # the round's episode comes last
    assert len(dagger["actions"]) == after.bc.lengths[-1]
    # how far the primitives' executed actions are from the planner's labels along that episode
    from benchmarks.npmp_dagger_gap import main as gap_main

    assert gap_main([str(planned), "--edge", "3", "--results", str(tmp_path / "gap.json")]) == 0
    # the fit alone reads a collection without DAgger rounds (there is no round's gap to report)
    assert gap_main([str(data), "--edge", "3", "--fit", str(primitives), "--results", str(tmp_path / "fit0.json")]) == 0
    alone = json.loads((tmp_path / "fit0.json").read_text())
    assert alone["rounds"] == {} and alone["fit"]["data"][str(data)]["collected"]["episodes"] == 1
    gap = json.loads((tmp_path / "gap.json").read_text())["rounds"][str(planned)]
    assert gap["episodes"] == 1 and gap["labeller"] == "planner" and gap["median_first"] > 0
    expected = float(((dagger["actions"][:3] - dagger["mean_actions"][:3]) ** 2).mean())
    assert gap["per_episode"][0]["first"] == pytest.approx(expected)
    above = np.flatnonzero(((dagger["actions"] - dagger["mean_actions"]) ** 2).mean(1) > 0.05)
    assert gap["per_episode"][0]["parts_before_end"] == (len(dagger["actions"]) - above[0] if len(above) else 0)
    for bad in ([str(data)], [str(planned), "--snippets", TRAIN], [str(tmp_path / "none.h5")],
                [str(planned), "--over", "0"]):
        with pytest.raises(SystemExit) as exit_:
            gap_main(bad)
        assert exit_.value.code == 2
    # a round labelled by the planner anchored to its own stored run (the collection's settings), then how well the
    # primitives fit each part of the data: the collected rollouts, the earlier round, the last
    anchored = tmp_path / "dagger_anchored.h5"
    assert npmp_main(["relabel", "--data", str(planned), "--primitives", str(primitives), "--out", str(anchored),
                      "--trajectories", "1", "--processes", "1", "--labeller", "anchored"]) == 0
    assert NPMPDataset(anchored).meta["relabelled"][-1]["labeller"] == "anchored"
    assert gap_main([str(anchored), "--edge", "3", "--fit", str(primitives), "--results", str(tmp_path / "fit.json")]) == 0
    fit = json.loads((tmp_path / "fit.json").read_text())["fit"]["data"][str(anchored)]
    assert [fit[part]["episodes"] for part in ("collected", "earlier rounds", "last round")] == [1, 1, 1]
    assert all(fit[part]["median_first"] > 0 for part in fit)
    # how much of that gap is the planner's own sampling: each state labelled twice from the same warm start; a
    # planner with no sampled candidates (the nominal alone) gives the same label twice, a sampling one does not
    from benchmarks.planner_label_noise import main as noise_main

    noise = tmp_path / "noise.json"
    common_noise = ["--primitives", str(primitives), "--snippets", looped, "--mocap", str(mocap), "--workers", "1",
                    "--edge", "3", "--results", str(noise), "--set", "horizon=4", "--set", "knots=1",
                    "--set", "iterations=1", "--set", "method=ps"]
    for candidates in (1, 4):
        assert noise_main([*common_noise, "--set", f"candidates={candidates}"]) == 0
        (episode,) = json.loads(noise.read_text())["episodes"]
        variance = episode["label_variance"]
        assert episode["steps"] > 0 and episode["gap"]["first"] > 0 and episode["forgotten_plan"]["first"] >= 0
        assert (variance["first"] == 0) if candidates == 1 else (variance["first"] > 0)
    for bad in (["--primitives", str(tmp_path / "none"), "--snippets", looped],
                ["--primitives", str(primitives), "--snippets", looped]):   # not in the shipped mocap file
        with pytest.raises(SystemExit) as exit_:
            noise_main(bad)
        assert exit_.value.code == 2
    # the teacher (the LQR law stored in the data) and the student under action noise, tracking ending off
    from benchmarks.npmp_noise import main as robust_main

    robust = tmp_path / "robust.json"
    common_robust = ["--mocap", str(mocap), "--snippets", looped, "--noise", "0", "0.1", "--seeds", "2",
                     "--results", str(robust)]
    assert robust_main([*common_robust, "--law", str(data), "--primitives", str(primitives)]) == 0
    measured = json.loads(robust.read_text())["controllers"]
    assert sorted(measured) == sorted([f"law:{data}", f"primitives:{primitives}"])
    for rows in measured.values():
        steps = rows[looped]
        assert len(steps["0"]["upright_steps"]) == 1 and len(steps["0.1"]["upright_steps"]) == 2
        assert all(0 < s <= steps["0"]["of"] for row in steps.values() for s in row["upright_steps"])
        assert all(len(row["travelled_m"]) == len(row["offset_m"]) == len(row["upright_steps"])
                   == len(row["turn_degrees"]) == len(row["reference_turn_degrees"])
                   == len(row["turn_by_second_degrees"]) and min(row["travelled_m"]) > 0 for row in steps.values())
        assert all(len(turns) == int(s * 0.03 + 1e-9) for row in steps.values()
                   for turns, s in zip(row["turn_by_second_degrees"], row["upright_steps"]))
    capsys.readouterr()
    assert robust_main([*common_robust, "--law", str(data)]) == 0 and capsys.readouterr().out == ""   # kept
    for bad in (common_robust, [*common_robust, "--law", str(tmp_path / "none.h5")],
                [*common_robust[:3], TRAIN, *common_robust[4:], "--law", str(data)]):   # not in the data
        with pytest.raises(SystemExit) as exit_:
            robust_main(bad)
        assert exit_.value.code == 2
    # where the student leaves the law's tube (benchmarks/npmp_tube.py): the tube is the collection's own noisy
    # rollouts around the law's noise-free run; the law labels the student's own states
    from benchmarks.npmp_tube import leaves_at, main as tube_main

    assert leaves_at(np.array([0.1, 0.3, 0.1, 0.3, 0.3]), np.full(5, 0.2), 2) == 3
    assert leaves_at(np.array([0.1, 0.3]), np.array([0.2, np.nan]), 1) is None   # no rollout got that far
    tube = tmp_path / "tube.json"
    common_tube = ["--data", str(data), "--mocap", str(mocap), "--snippets", looped, "--results", str(tube)]
    assert tube_main([*common_tube, "--primitives", str(primitives), "--every", "5"]) == 0
    (row,) = json.loads(tube.read_text())["primitives"][str(primitives)].values()
    assert 0 < row["upright"] <= row["frames"] and row["label_error_inside"] > 0
    assert len(row["student_distance"]) == len(row["tube_p90"]) and row["student_distance"][0] > 0
    capsys.readouterr()
    assert tube_main([*common_tube, "--primitives", str(primitives), "--every", "5"]) == 0   # kept, not rerun
    assert capsys.readouterr().out == ""
    # the law taking over at the first frame drives its own noise-free run
    assert tube_main([*common_tube, "--primitives", str(primitives), "--every", "5", "--handover", "0"]) == 0
    row = json.loads(tube.read_text())["primitives"][str(primitives)][f"{looped} (tube of {data}, noise 0, handover 0)"]
    (handover,) = row["handovers"]
    law = NPMPDataset(data, snippets=[looped]).attrs[looped]
    assert handover["at"] == 0 and handover["distance"] < 1e-6
    assert handover["to_end"] == (not bool(law["nominal_terminated"]))
    # or the collection's planner takes over (here the tiny one the data was collected with)
    assert tube_main([*common_tube, "--primitives", str(primitives), "--handover", "1", "--handover-by", "planner"]) == 0
    rows = json.loads(tube.read_text())["primitives"][str(primitives)]
    (handover,) = rows[f"{looped} (tube of {data}, noise 0, handover by planner 1)"]["handovers"]
    assert handover["at"] == 1 and handover["upright"] >= 1
    assert tube_main([*common_tube, "--nominals"]) == 0   # one snippet: no pair of teachers to compare
    assert json.loads(tube.read_text())["nominals"] == {str(data): {}}
    assert tube_main([*common_tube, "--laws"]) == 0
    law_row = json.loads(tube.read_text())["laws"][str(data)][looped]
    assert law_row["rollouts"] == 1 and law_row["to_the_end"] in (0, 1) and law_row["frames"] > 0
    assert len(law_row["falls"]) == 1 - law_row["to_the_end"] and "joins" not in law_row   # a snippet, no chain
    for bad in ([], ["--primitives", str(tmp_path / "none")], ["--primitives", str(primitives), "--stay", "0"],
                ["--primitives", str(primitives), "--snippets", TRAIN],
                ["--primitives", str(primitives), "--handover-by", "planner"]):
        with pytest.raises(SystemExit) as exit_:
            tube_main([*common_tube, *bad])
        assert exit_.value.code == 2
    # steering a law (benchmarks/npmp_steer_law.py) needs a periodic one, and commands it knows
    from benchmarks.npmp_steer_law import commanded_turn, main as steer_main

    assert commanded_turn("arc15", 3.0) == (30.0, True) and commanded_turn("step-45", 1.0) == (0.0, False)
    for bad, message in (([], "holds no periodic law"), (["--commands", "spin"], "need commands")):
        with pytest.raises(SystemExit) as exit_:
            steer_main(["--mocap", str(mocap), "--law", str(data), "--snippets", looped, "--results",
                        str(tmp_path / "steer.json"), *bad])
        assert exit_.value.code == 2 and message in capsys.readouterr().err
    # whether primitives act on an arc's cue (benchmarks/npmp_arc_cue.py): arcs only, and each needs its law
    from benchmarks.npmp_arc_cue import arc_parts, main as cue_main, measure

    assert arc_parts("07_01-0-loop10-left15") == ("07_01-0-loop10", "07_01-0-loop10-right15")
    for bad, message in ((looped, "is not an arc"), (f"{looped}-right15", "holds no law for")):
        with pytest.raises(SystemExit) as exit_:
            cue_main(["--mocap", str(mocap), "--law", str(data), "--primitives", str(primitives), "--arcs", bad,
                      "--results", str(tmp_path / "cue.json")])
        assert exit_.value.code == 2 and message in capsys.readouterr().err
    nominal = result["nominal"]
    states, labels = (torch.as_tensor(nominal[k][:int(nominal["lengths"][0])]) for k in ("states", "mean_actions"))
    reference = reference_playback(looped, ref_path=mocap)
    reversed_ = Reference(reference.states[::-1].copy(), reference.root[::-1].copy())
    same = measure(load_primitives(primitives)[0], states, labels, {"own": reference, "straight": reversed_,
                                                                    "mirror": reference})
    assert same["own_vs_mirror"] == 0.0 and same["label_mse"]["own"] == same["label_mse"]["mirror"]
    assert same["label_mse"]["straight"] != same["label_mse"]["own"]   # the latent reads the reference it is given
    # primitives that also read the reference's path (distill --path-offsets): the dataset's path is the clip's, the
    # latent depends on it, a DAgger round drives with it, and --init keeps it
    from priors.npmp.model import reference_path

    pathed = tmp_path / "pathed"
    assert npmp_main(["distill", "--data", str(data), *TINY_MODEL, "--path-offsets", "15", "30",
                      "--out", str(pathed)]) == 0
    path_model, path_meta = load_primitives(pathed)
    assert path_model.config.path_offsets == (15, 30) and path_meta["config"]["path_offsets"] == [15, 30]
    with_path = NPMPDataset(data, lookahead_source="reference", path_offsets=(15, 30))
    torch.testing.assert_close(with_path.context, reference_path(torch.as_tensor(reference.root), (15, 30)))
    batch = with_path.sample_bc(3, 4, torch.Generator().manual_seed(0))
    assert batch.context.shape == (3, 4 + 5, 6) and batch.context.abs().sum() > 0
    from pipelines.npmp.evaluate import reference_encoder

    mirrored = reference.root * np.array([1, 1, -1], np.float32)   # the heading negated
    latents = [reference_encoder(path_model, torch.as_tensor(reference.states), torch.as_tensor(root))(0, states[0])
               for root in (reference.root, mirrored)]
    assert not torch.allclose(*latents, rtol=0, atol=1e-7)
    cue = measure(path_model, states, labels, {"own": reference, "straight": reference,
                                               "mirror": Reference(reference.states, mirrored)})
    assert cue["label_mse"]["own"] == cue["label_mse"]["straight"]
    with pytest.raises(ValueError, match="root's"):
        reference_encoder(path_model, torch.as_tensor(reference.states))
    assert npmp_main(["relabel", "--data", str(data), "--primitives", str(pathed), "--out",
                      str(tmp_path / "pathed.h5"), "--trajectories", "1", "--processes", "1"]) == 0
    capsys.readouterr()
    added = tmp_path / "added"   # primitives without a path, continued with one
    assert npmp_main(["distill", "--data", str(data), *TINY_MODEL, "--init", str(primitives), "--path-offsets", "15",
                      "30", "--out", str(added)]) == 0
    added_model, added_meta = load_primitives(added)
    assert added_model.config.path_offsets == (15, 30) and added_meta["path_added"] == [15, 30]
    assert added_model.config.latent_dim == load_primitives(primitives)[0].config.latent_dim
    # primitives that read the path, continued reading the reference's states far ahead as well (--far-offsets)
    from priors.npmp.model import reference_far

    far = tmp_path / "far"
    assert npmp_main(["distill", "--data", str(data), *TINY_MODEL, "--init", str(pathed), "--far-offsets", "10", "20",
                      "--out", str(far)]) == 0
    far_model, far_meta = load_primitives(far)
    assert far_model.config.far_offsets == (10, 20) and far_model.config.path_offsets == (15, 30)
    assert far_meta["far_added"] == [10, 20]
    far_report = tmp_path / "far_report.json"   # the one-shot latents are encoded with the far states and the path
    assert npmp_main(["evaluate", "--primitives", str(far), "--data", str(data), "--latent-iterations", "1",
                      "--out", str(far_report), "--no-write-meta"]) == 0
    (far_clip,) = json.loads(far_report.read_text())["train"]["clips"]
    assert far_clip["snippet"] == looped and far_clip["horizon"] > 0 and far_clip["one_shot_steps"] > 0
    with_far = NPMPDataset(data, lookahead_source="reference", path_offsets=(15, 30), far_offsets=(10, 20))
    torch.testing.assert_close(with_far.context[:, :2 * with_far.state_dim],
                               reference_far(torch.as_tensor(reference.states), (10, 20)))
    assert npmp_main(["distill", "--data", str(data), *TINY_MODEL, "--far-offsets", "3", "--out",
                      str(tmp_path / "no")]) == 2
    assert "beyond the look-ahead" in capsys.readouterr().err and not (tmp_path / "no").exists()
    for bad, message in ((["--init", str(pathed), "--path-offsets", "15"], "cannot apply"),
                         (["--path-offsets", "0"], "increasing positive"),
                         (["--path-offsets", "15", "--lookahead", "trajectory"], "need the reference look-ahead")):
        assert npmp_main(["distill", "--data", str(data), *TINY_MODEL, *bad, "--out", str(tmp_path / "no")]) == 2
        assert message in capsys.readouterr().err and not (tmp_path / "no").exists()
    capsys.readouterr()
    assert npmp_main(["relabel", "--data", str(data), "--primitives", str(primitives), "--out", str(tmp_path / "y.h5"),
                      "--trajectories", "1", "--processes", "1", *planner]) == 2
    assert "--planner-set needs --labeller planner" in capsys.readouterr().err
    # the law rebuilt around the planner's run stored in the data (nothing planned again) and following the walker,
    # its rollouts and a DAgger round ending on a fall only; a stored run made with other settings is refused
    fall, fall_round = tmp_path / "fall.h5", tmp_path / "fall_dagger.h5"
    following = ["--lqr-set", "follow_walker=true", "--ending", "fall"]
    assert npmp_main([*common, *following, "--snippets", looped, "--mocap", str(mocap), "--data", str(fall),
                      "--plan-from", str(data)]) == 0
    (refollowed,), meta = read_results(fall)
    for key in ("commands", "physics_states"):
        np.testing.assert_array_equal(refollowed["plan"][key], result["plan"][key])
    assert meta["ending"] == "fall" and meta["lqr"]["follow_walker"] is True
    assert meta["plan_from"] == [str(data.resolve())]
    capsys.readouterr()   # several files may hold the runs; each must exist
    assert npmp_main([*common, *following, "--snippets", looped, "--mocap", str(mocap), "--data",
                      str(tmp_path / "v.h5"), "--plan-from", str(data), str(tmp_path / "none.h5")]) == 2
    assert "no data file" in capsys.readouterr().err and not (tmp_path / "v.h5").exists()
    assert npmp_main(["relabel", "--data", str(data), "--primitives", str(primitives), "--out", str(fall_round),
                      "--trajectories", "1", "--processes", "1", *following]) == 0
    round_meta = NPMPDataset(fall_round).meta["relabelled"][-1]
    (kept,), _ = read_results(fall_round)   # the round keeps the run its labeller was built around
    for key in ("commands", "physics_states"):
        np.testing.assert_array_equal(kept["plan"][key], result["plan"][key])
    assert round_meta["ending"] == "fall" and round_meta["lqr"] == {**meta["lqr"]}
    # the periodic law: only for a looped snippet, whose stride the mocap file records
    capsys.readouterr()
    periodic = ["--lqr-set", "periodic=true", "--lqr-set", "cycle_starts=1", "--lqr-set", "cycle_iterations=2",
                "--lqr-set", "cycle_trials=1"]
    assert npmp_main([*common, *periodic, "--snippets", TRAIN, "--data", str(tmp_path / "p.h5")]) == 2
    assert "needs a looped snippet" in capsys.readouterr().err and not (tmp_path / "p.h5").exists()
    # the tiny planner falls within the loop's first stride: no stride of its run to start the iteration from
    assert npmp_main([*common, *periodic, "--snippets", looped, "--mocap", str(mocap), "--data",
                      str(tmp_path / "p.h5"), "--plan-from", str(data)]) == 2
    assert "holds no stride of 36 steps starting in steps 16-87" in capsys.readouterr().err
    capsys.readouterr()
    assert npmp_main([*common, "--planner-set", "knots=2", "--snippets", looped, "--mocap", str(mocap),
                      "--data", str(tmp_path / "z.h5"), "--plan-from", str(data)]) == 2
    assert "made with other settings" in capsys.readouterr().err
    assert npmp_main(["relabel", "--data", str(data), "--primitives", str(primitives), "--out", str(tmp_path / "w.h5"),
                      "--labeller", "planner", "--lqr-set", "follow_walker=true", *planner]) == 2
    assert "--lqr-set needs --labeller collected" in capsys.readouterr().err
    # shipped snippets collected with another planner setting: merged only with --mixed-planners, each input's
    # planner kept
    shipped, merged = tmp_path / "shipped.h5", tmp_path / "merged.h5"
    assert npmp_main([*common, "--planner-set", "warm_start_decay=1.0", "--snippets", TRAIN, "--data",
                      str(shipped)]) == 0
    # saved runs come from the first file holding the snippet's; a snippet none of them holds is planned
    again, planned_again = tmp_path / "again.h5", tmp_path / "planned_again.h5"
    capsys.readouterr()
    assert npmp_main([*common, "--snippets", looped, "--mocap", str(mocap), "--data", str(again),
                      "--plan-from", str(shipped), str(data)]) == 0
    (reused,), _ = read_results(again)
    np.testing.assert_array_equal(reused["plan"]["commands"], result["plan"]["commands"])
    assert reused["attrs"]["plan_from"] == str(data)
    assert npmp_main([*common, "--snippets", looped, "--mocap", str(mocap), "--data", str(planned_again),
                      "--plan-from", str(shipped)]) == 0
    assert read_results(planned_again)[0][0]["attrs"]["plan_from"] == ""
    capsys.readouterr()
    assert npmp_main(["merge", str(shipped), str(data), "--out", str(merged)]) == 2
    assert "--mixed-planners" in capsys.readouterr().err and not merged.exists()
    assert npmp_main(["merge", str(shipped), str(data), "--out", str(merged), "--mixed-planners"]) == 0
    both = NPMPDataset(merged, lookahead_source="reference")
    assert [m["planner"]["warm_start_decay"] for m in both.meta["merged_from"]] == [1.0, 0.97]
    assert both.snippets == sorted([TRAIN, looped])
    # a data file whose mocap file is gone says so
    mocap.rename(tmp_path / "moved.h5")
    with pytest.raises(Exception, match="mocap file .* is missing"):
        NPMPDataset(data, lookahead_source="reference")
    capsys.readouterr()
    assert npmp_main(["collect", "--snippets", TRAIN, "--mocap", str(mocap), "--data", str(tmp_path / "x.h5")]) == 2
    assert "--mocap needs --experts mpc" in capsys.readouterr().err


@pytest.mark.slow
def test_a_student_that_reads_the_path_is_steered_by_the_reference_it_is_shown(tmp_path, capsys):
    """benchmarks/npmp_steer_student.py: the encoder reads the straight walk or one of its arcs, as the heading error
    picks. With a deadband no error reaches, it is the plain closed-loop student (benchmarks/npmp_noise.py); with
    none, it switches; primitives that do not read the path are refused."""
    from benchmarks.npmp_noise import main as robust_main
    from benchmarks.npmp_steer_student import main as steer_main
    from envs.mocap import convert
    from priors.npmp import NPMP, NPMPConfig, save_primitives

    mocap, walk = tmp_path / "arcs.h5", "07_01-0-loop4"
    assert convert.main(["--clips", "07_01", "--loop", "4", "--curve", "15", "--output", str(mocap)]) == 0
    shipped, meta = load_primitives(ROOT / "data" / "primitives" / "npmp")
    torch.manual_seed(0)
    for name, offsets in (("pathed", (15, 30)), ("blind", ())):
        model = NPMP(NPMPConfig(state_dim=shipped.config.state_dim, action_dim=shipped.config.action_dim,
                                latent_dim=4, encoder_hidden=(16,), decoder_hidden=(16,), lookahead=2,
                                lookahead_source="reference", path_offsets=offsets))
        save_primitives(model, tmp_path / name, meta["obs_groups"], clips=[walk])
    results = tmp_path / "steer.json"
    common = ["--mocap", str(mocap), "--snippets", walk, "--noise", "0", "--results", str(results)]
    assert steer_main([*common, "--primitives", str(tmp_path / "pathed"), "--commands", "hold", "arc30",
                       "--deadband", "0"]) == 0
    assert steer_main([*common, "--primitives", str(tmp_path / "pathed"), "--commands", "hold", "to0.5at90", "to20at0",
                       "--deadband", "180"]) == 0
    rows = json.loads(results.read_text())["primitives"][str(tmp_path / "pathed")][walk]
    assert sorted(rows) == ["arc30, rate 15, deadband 0", "hold, rate 15, deadband 0", "hold, rate 15, deadband 180",
                            "to0.5at90, rate 15, deadband 180", "to20at0, rate 15, deadband 180"]
    # a target half a metre away is reached at the start, one 20 m away not before the fall
    assert rows["to0.5at90, rate 15, deadband 180"]["0"]["reached_at_step"] == [0]
    assert rows["to20at0, rate 15, deadband 180"]["0"]["reached_at_step"] == [None]
    assert rows["to0.5at90, rate 15, deadband 180"]["0"]["closest_to_target_m"][0] < 1.0
    assert rows["to20at0, rate 15, deadband 180"]["0"]["closest_to_target_m"][0] > 10.0
    assert rows["hold, rate 15, deadband 180"]["0"]["closest_to_target_m"] == [None]
    for row in rows.values():
        (reads,) = row["0"]["reads"]
        assert sum(reads.values()) == pytest.approx(1.0, abs=0.01) and row["0"]["steps"][0] > 0
    assert rows["hold, rate 15, deadband 180"]["0"]["reads"] == [{"straight": 1.0, "left": 0.0, "right": 0.0}]
    assert rows["hold, rate 15, deadband 0"]["0"]["reads"][0]["straight"] < 0.5   # any drift switches
    # unless the first choice (no error yet: the straight walk) must be held longer than the episode lasts
    assert steer_main([*common, "--primitives", str(tmp_path / "pathed"), "--commands", "hold", "--deadband", "0",
                       "--dwell", "100"]) == 0
    held = json.loads(results.read_text())["primitives"][str(tmp_path / "pathed")][walk]
    assert held["hold, rate 15, deadband 0, dwell 100"]["0"]["reads"] == [{"straight": 1.0, "left": 0.0, "right": 0.0}]
    plain = tmp_path / "plain.json"
    assert robust_main(["--mocap", str(mocap), "--snippets", walk, "--noise", "0", "--primitives",
                        str(tmp_path / "pathed"), "--results", str(plain)]) == 0
    (only,) = json.loads(plain.read_text())["controllers"].values()
    closed = rows["hold, rate 15, deadband 180"]["0"]
    plain_row = only[walk]["0"]
    assert (closed["steps"], closed["turn_degrees"]) == (plain_row["upright_steps"], plain_row["turn_degrees"])
    capsys.readouterr()
    assert steer_main([*common, "--primitives", str(tmp_path / "pathed"), "--commands", "hold",
                       "--deadband", "180"]) == 0
    assert capsys.readouterr().out == ""   # kept
    # steered by a yaw rate: at the arcs' own rate, or none, the encoder reads exactly the arc or the walk
    from agents.npmp import walk_references
    from priors.npmp.reference import bent_reference_input, reference_input

    pathed, _ = load_primitives(tmp_path / "pathed")
    references = walk_references(walk, 15.0, str(mocap))
    # targets are placed and steered to along the walking direction: the root's heading turned by FACING
    from benchmarks.npmp_steer_law import FACING

    root = references["straight"].root.cpu().numpy()
    travel = np.arctan2(*(root[60, 1::-1] - root[0, 1::-1]))
    assert abs(np.angle(np.exp(1j * (travel - root[0, 2] - FACING)))) < np.radians(15)
    bent = bent_reference_input(pathed, references, 15.0)
    for side, rate in (("straight", 0.0), ("left", 15.0), ("right", -15.0)):
        shown = reference_input(pathed, references[side].states, references[side].root)
        for t in (0, 40, len(references[side].states) - 3):
            torch.testing.assert_close(bent(t, rate), shown(t), atol=1e-4, rtol=0)
    # at half the arc's rate the path 30 frames ahead turns by half the arc's turn more than the walk's own
    assert float(bent(40, 7.5)[-1] - bent(40, 0.0)[-1]) == pytest.approx(np.radians(7.5 * 30 * 0.03), abs=1e-4)
    assert steer_main([*common, "--primitives", str(tmp_path / "pathed"), "--commands", "step45", "--steer", "rate",
                       "--gain", "2", "--slew", "30"]) == 0
    rated = json.loads(results.read_text())["primitives"][str(tmp_path / "pathed")][walk]
    assert rated["step45, rate 15, steer rate, gain 2, slew 30"]["0"]["mean_abs_rate"][0] >= 0
    # drawn: the same episode again, one strip of frames a second (the student falls within a second or two)
    assert steer_main([*common, "--primitives", str(tmp_path / "pathed"), "--commands", "hold", "--deadband", "180",
                       "--frames", str(tmp_path / "frames")]) == 0
    (strip,) = (tmp_path / "frames").iterdir()
    assert strip.name == f"{str(tmp_path / 'pathed').replace('/', '_')}__{walk}__hold__noise0__0.png"
    assert json.loads(results.read_text())["primitives"][str(tmp_path / "pathed")][walk] == {**rows, **held, **rated}
    for bad, message in ((["--primitives", str(tmp_path / "blind")], "does not read the reference's path"),
                         (["--primitives", str(tmp_path / "pathed"), "--commands", "spin"], "need commands"),
                         (["--primitives", str(tmp_path / "pathed"), "--rate", "20"], "07_01-0-loop4"),
                         (["--primitives", str(tmp_path / "pathed"), "--rate", "fast"], "--rate must be"),
                         (["--primitives", str(tmp_path / "pathed"), "--steer", "rate", "--gain", "0"], "--gain > 0")):
        with pytest.raises(SystemExit) as exit_:
            steer_main([*common, *bad])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_the_fit_reads_at_most_the_asked_episodes_spread_over_each_part():
    """npmp_dagger_gap --fit --per-part N: every episode is a closed-loop pass of the encoder, so N of a part's
    episodes are read, evenly spread from its first to its last; a part with fewer is read whole."""
    from benchmarks.npmp_dagger_gap import spread

    assert spread(list(range(10, 20)), 3) == [10, 14, 19]   # linspace 0, 4.5, 9 rounded half to even
    assert spread([4, 5], 3) == [4, 5] and spread([4, 5], None) == [4, 5]
    assert len(set(spread(list(range(270)), 6))) == 6
