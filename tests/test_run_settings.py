"""Where settings live: the run owns the replay/update schedule, svg0's parts have their own config sections, and
run directories saved in the earlier flat layout still load."""
import dataclasses
import json

import pytest

import agents
from agents.behaviour_prior import PriorSection
from agents.config import ConfigError, apply_overrides, from_dict
from agents.exploration import ExplorationSection
from agents.loop import RunConfig, build_run, load_run_config
from agents.schedule import Schedule
from agents.svg0 import SVG0Agent, SVG0Config


def test_sections_are_set_by_dotted_keys_and_a_bare_section_name_sets_its_kind():
    config = apply_overrides(SVG0Config(), {"prior": "mlp", "prior.kl_coef": "0.1", "prior.obs": "proprio,task",
                                            "exploration": "ucb", "exploration.ensemble_size": "3"})
    assert config.prior == PriorSection(kind="mlp", kl_coef=0.1, obs=("proprio", "task"))
    assert config.exploration == ExplorationSection(kind="ucb", ensemble_size=3)
    assert config.hidden == SVG0Config().hidden


@pytest.mark.parametrize("key,value,fragment", [
    ("kl_coef", "0.1", "prior.kl_coef"),                # a flat name from before the sections: the new one is named
    ("prior.kl_coeff", "0.1", "prior.kl_coef"),         # a typo inside a section
    ("exploration.ensemble_size", "1", "ensemble_size"),   # the section's own validation
    ("prior.kind", "gmm", "prior.kind must be"),
    ("hidden.width", "3", "unknown setting"),           # not a section
])
def test_bad_section_settings_are_one_config_error_naming_the_key(key, value, fragment):
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        apply_overrides(SVG0Config(), {key: value})


def test_the_run_owns_the_schedule_and_starts_from_the_agents_own(tmp_path):
    flags = {"env": "cartpole-swingup", "agent": "svg0"}
    run, config, _ = build_run(flags, {"batch_size": "32", "schedule.update_every": "2", "hidden": "32,32"},
                               logdir=str(tmp_path / "a"))
    assert run.schedule == dataclasses.replace(SVG0Agent.schedule, batch_size=32, update_every=2)
    assert config.hidden == (32, 32) and not hasattr(config, "batch_size")
    dqn, _, _ = build_run({"env": "deep-sea-5", "agent": "dqn"}, {}, logdir=str(tmp_path / "b"))
    assert dqn.schedule == agents.agent_class("dqn").schedule != SVG0Agent.schedule
    assert RunConfig(agent="dqn").resolved().schedule == dqn.schedule
    with pytest.raises(ConfigError, match="update_every must be >= 1"):
        build_run(flags, {"update_every": "0"}, logdir=str(tmp_path / "c"))
    with pytest.raises(ConfigError, match="replay_capacity must exceed"):
        build_run(flags, {"replay_capacity": "5"}, logdir=str(tmp_path / "d"))
    with pytest.raises(ConfigError, match="Did you mean batch_size"):
        build_run(flags, {"batch_sise": "3"}, logdir=str(tmp_path / "e"))
    with pytest.raises(ConfigError, match="schedule"):   # the library call that takes agent fields only says where
        agents.resolve_config("svg0", {"batch_size": "8"})
    assert agents.resolve("svg0", {"batch_size": "8", "prior": "mlp"}) == (
        SVG0Config(prior=PriorSection(kind="mlp")), dataclasses.replace(SVG0Agent.schedule, batch_size=8))


def test_a_run_directory_saved_in_the_flat_layout_loads_with_the_same_settings(tmp_path):
    """Before the schedule moved to the run and svg0's parts had sections, config.json kept everything flat in
    "agent"; such runs (resumed benchmarks, saved experts) must load into exactly the settings they ran with."""
    old_agent = {"hidden": [64, 64], "sequence_length": 10, "batch_size": 32, "target_period": 100,
                 "replay_capacity": 5000, "learning_starts": 100, "update_every": 2, "updates_per_step": 1,
                 "prior": "mlp", "prior_obs": ["proprio"], "kl_coef": 0.05, "prior_lr": 0.001,
                 "prior_hidden": [32, 32], "prior_init": "", "prior_trainable": True, "latent_dim": 2,
                 "exploration": "bootstrap", "ensemble_size": 4, "ensemble_prior_scale": 2.0, "mask_prob": 0.5}
    old_run = {k: v for k, v in dataclasses.asdict(RunConfig(env="cartpole-swingup", agent="svg0",
                                                             logdir=str(tmp_path))).items() if k != "schedule"}
    (tmp_path / "config.json").write_text(json.dumps({"run": old_run, "agent": old_agent}))
    run, config = load_run_config(tmp_path)
    assert run.schedule == Schedule(replay_capacity=5000, learning_starts=100, update_every=2, updates_per_step=1,
                                    batch_size=32)
    assert config == SVG0Config(hidden=(64, 64),
                                prior=PriorSection(kind="mlp", obs=("proprio",), kl_coef=0.05, lr=0.001,
                                                   hidden=(32, 32)),
                                exploration=ExplorationSection(kind="bootstrap", ensemble_size=4, prior_scale=2.0))
    # and what is saved now round-trips
    saved = json.loads(json.dumps({"run": dataclasses.asdict(run), "agent": dataclasses.asdict(config)}))
    assert from_dict(RunConfig, saved["run"]) == run and from_dict(SVG0Config, saved["agent"]) == config
