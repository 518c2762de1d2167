"""python -m pipelines robustness: deterministic perturbed rollouts, AMLS estimates, replayable cases, bad input."""
import json
import math

import numpy as np
import pytest

from tests.test_cli import FAST


@pytest.fixture(scope="module")
def walker_run(tmp_path_factory):
    """A barely trained walker-stand run (the estimate works on any checkpoint)."""
    import train

    run_dir = tmp_path_factory.mktemp("robustness") / "walker"
    assert train.main(["--env", "walker-stand", "--agent", "svg0", "--steps", "200", "--logdir", str(run_dir),
                       "--eval-every", "1000", *FAST]) == 0
    return run_dir


def robustness(*args):
    from pipelines.__main__ import main

    return main(["robustness", *map(str, args)])


def test_rollouts_are_deterministic_and_the_perturbation_matters(walker_run):
    from pipelines.robustness import PerturbedRollouts
    from envs.perturb import PerturbationModel

    rollouts = PerturbedRollouts(walker_run, PerturbationModel(horizon=1.0, push_every=0.3, push_scale=2.0),
                                 "return", threshold=0.0, fall_fraction=0.5)
    layout = rollouts.shape
    assert layout["dim"] == len(layout["qpos_index"]) + rollouts.dm.physics.model.nv + 3 * len(layout["push_starts"])
    assert len(layout["qpos_index"]) == 9          # walker: 3 planar root joints + 6 hinges, all perturbed
    rng = np.random.default_rng(0)
    x = rng.standard_normal(rollouts.dim)
    first, again = rollouts.rollout(x), rollouts.rollout(x)
    assert first == again                           # every source of randomness is inside x
    pushes_only = x.copy()
    pushes_only[layout["slices"]["pushes"]] *= 3.0
    assert rollouts.rollout(pushes_only) != first
    starts_only = x.copy()
    starts_only[layout["slices"]["qvel"]] *= -1.0
    assert rollouts.rollout(starts_only) != first


def test_estimate_writes_report_and_cases_and_a_case_replays_exactly(walker_run, tmp_path, capsys):
    out = tmp_path / "estimate"
    assert robustness(walker_run, "--failure", "fall", "--horizon", "1.0", "--chains", "10", "--mh-steps", "1",
                      "--runs", "2", "--naive", "10", "--out", out) == 0
    report = json.loads((out / "report.json").read_text())
    assert len(report["amls"]["runs"]) == 2 and report["naive_monte_carlo"]["samples"] == 10
    assert report["steps_per_rollout"] > 0 and report["rollouts"] >= 2 * 10 + 10
    cases = json.loads((out / "cases.json").read_text())["cases"]
    assert len(cases) == 2 * 5 and all(len(c["x"]) == report["dim"] for c in cases)
    assert cases[0]["score"] == max(c["score"] for c in cases)
    assert (out / "case_0.gif").stat().st_size > 0
    capsys.readouterr()
    assert robustness(walker_run, "--replay", out / "cases.json", "--case", "3", "--no-video") == 0
    assert "reproduced" in capsys.readouterr().out


@pytest.mark.slow
def test_amls_agrees_with_naive_monte_carlo_on_a_moderate_event(walker_run):
    """P(return <= the 10 % quantile of 300 naive rollouts): AMLS (2 runs of 100 chains) within 0.25 in log10 of the
    quantile's own probability, and of a naive estimate on fresh rollouts."""
    import torch

    from envs.perturb import PerturbationModel
    from inference.rare_events import amls, gaussian_model
    from pipelines.robustness import PerturbedRollouts

    rollouts = PerturbedRollouts(walker_run, PerturbationModel(horizon=0.5, push_every=0.2, push_scale=1.0),
                                 "return", threshold=0.0, fall_fraction=0.5)
    sample, log_density = gaussian_model(rollouts.dim)
    returns = -rollouts.score(sample(300, torch.Generator().manual_seed(1))).numpy()   # threshold 0: s = -return
    rollouts.threshold = float(np.quantile(returns, 0.1))
    fresh = rollouts.score(sample(400, torch.Generator().manual_seed(2)))
    naive = float((fresh >= 0).double().mean())
    estimates = [amls(sample, log_density, rollouts.score, n=100, rho=0.1, mh_steps=5,
                      generator=torch.Generator().manual_seed(r)).log_probability / math.log(10) for r in range(2)]
    assert abs(np.mean(estimates) - math.log10(naive)) < 0.25, (estimates, naive)
    assert abs(np.mean(estimates) - math.log10(0.1)) < 0.25, estimates


def test_bad_input_is_one_clear_error(walker_run, tmp_path, capsys):
    def one_line_error(*args, fragment):
        assert robustness(*args) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], err

    one_line_error(tmp_path / "nowhere", fragment="not a run directory")
    one_line_error(walker_run, "--failure", "return", fragment="--threshold")
    one_line_error(walker_run, "--push-scale", "-1", fragment="push_scale")
    one_line_error(walker_run, "--chains", "3", fragment="--chains")
    one_line_error(walker_run, "--chains", "10", "--rho", "0.05", fragment="keeps no chain")
    one_line_error(walker_run, "--push-duration", "2", fragment="overlap")
    (tmp_path / "bad.json").write_text("{")
    one_line_error(walker_run, "--replay", tmp_path / "bad.json", fragment="not a cases file")
    existing = tmp_path / "exists"
    existing.mkdir()
    one_line_error(walker_run, "--out", existing, "--chains", "10", fragment="exists")
