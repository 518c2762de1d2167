"""The NPMP pipeline end to end at toy scale (issue #6): two real tracking experts trained on Ray (one distilled, one
held out), noisy-rollout and LFPC data, a tiny NPMP distilled by BC and by LFPC, one-shot imitation and latent
optimisation, then ``train.py --env humanoid --agent npmp`` on the resulting primitives file."""
import json
import subprocess
import sys

import pytest

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


def test_npmp_agent_trains_on_the_pipeline_primitives(pipeline):
    work, _ = pipeline
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "--env", "humanoid", "--agent", "npmp", "--steps", "120",
         "--set", f"primitives={work / 'primitives'}", "--set", "learning_starts=40", "--set", "hidden=16,16",
         "--set", "batch_size=4", "--eval-episodes", "1", "--logdir", str(work / "reuse")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (work / "reuse" / "checkpoints").is_dir()
