"""Train an agent on an environment.

    python train.py --env cartpole-swingup --agent svg0 --steps 100000 --logdir runs/cartpole
    python train.py --resume runs/cartpole --steps 200000       # continue a run from its last checkpoint
    python train.py --list                                      # environment names and agents
    tensorboard --logdir runs

``--set key=value`` sets any field of the agent's config (``section.key`` for the fields of one of its parts, e.g.
``--set prior=mlp --set prior.kl_coef=0.1``), of the run's replay/update schedule (``--set batch_size=64``) or of the
run config; ``--list`` shows them.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", help="environment name, e.g. cartpole-swingup or gym:Pendulum-v1")
    p.add_argument("--agent", help="agent name, e.g. svg0")
    p.add_argument("--steps", type=int, help="environment steps to train for (counting action repeats)")
    p.add_argument("--seed", type=int)
    p.add_argument("--action-repeat", type=int)
    p.add_argument("--logdir", help="run directory (default: runs/<env>-<agent>-<seed>-<time>)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"])
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint")
    p.add_argument("--eval-every", type=int)
    p.add_argument("--eval-episodes", type=int)
    p.add_argument("--video-every", type=int, help="environment steps between evaluation videos (0: none)")
    p.add_argument("--checkpoint-every", type=int)
    p.add_argument("--num-envs", type=int, help="environments per actor, stepped in parallel processes (default 1)")
    p.add_argument("--actors", type=int, help="distributed actor processes on Ray (default 0: act in this process)")
    p.add_argument("--address", help="Ray cluster for --actors: auto or ray://host:port (default: a local cluster)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="set a config field, e.g. --set batch_size=256 or --set prior.kl_coef=0.1 (repeatable)")
    p.add_argument("--list", action="store_true", help="list environments, agents and config fields, then exit")
    return p.parse_args(argv)


def print_list() -> None:
    import agents
    import envs
    from agents.config import settable_keys

    for family, names in envs.catalogue().items():
        print(f"{family} environments ({len(names)}):")
        for n in names:
            print(f"  {n}")
    from agents.loop import RunConfig

    print("run settings (flags, or --set key=value):")
    for f in dataclasses.fields(RunConfig):
        if f.name != "schedule":
            print(f"      {f.name} = {f.default!r}")
    print("agents (--set key=value; section.key for a part's settings, and the run's replay/update schedule):")
    for name in agents.names():
        cls = agents.agent_class(name)
        print(f"  {name}:")
        print("    schedule: " + ", ".join(f"{k}={v!r}" for k, v in dataclasses.asdict(cls.schedule).items()))
        defaults = dataclasses.asdict(cls.Config())
        for key in settable_keys(cls.Config):
            value = defaults
            for part in key.split("."):
                value = value[part]
            print(f"      {key} = {value!r}")


def build(args: argparse.Namespace):
    """(run config, agent config, checkpoint to resume from or None) for parsed flags (agents.loop.build_run)."""
    from agents.config import split_overrides
    from agents.loop import build_run

    flags = {"env": args.env, "agent": args.agent, "steps": args.steps, "seed": args.seed,
             "action_repeat": args.action_repeat, "device": args.device, "eval_every": args.eval_every,
             "eval_episodes": args.eval_episodes, "video_every": args.video_every,
             "checkpoint_every": args.checkpoint_every, "num_envs": args.num_envs, "actors": args.actors,
             "address": args.address}
    return build_run({k: v for k, v in flags.items() if v is not None}, split_overrides(args.overrides),
                     resume=Path(args.resume) if args.resume else None, logdir=args.logdir)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list:
        print_list()
        return 0
    from agents.checkpoint import CheckpointError
    from agents.config import ConfigError
    from envs import EnvError

    from agents.protocol import RunInterrupted, TrainingDiverged
    from agents.runlock import RunDirectoryBusy
    from agents.vector import EnvWorkerError
    from cluster import ClusterError

    try:
        run, agent_config, resume_from = build(args)
        from agents.loop import Trainer

        trainer = Trainer(run, agent_config, resume_from)
        if resume_from is not None:
            print(f"resuming {run.logdir} at step {trainer.env_steps} from {resume_from.name}", file=sys.stderr)
        result = trainer.train()
    except (EnvError, ConfigError, ClusterError, CheckpointError, TrainingDiverged, EnvWorkerError,
            RunDirectoryBusy) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # an unwritable or invalid --logdir, a full disk
        print(f"error: {e.strerror or e} ({e.filename})" if e.filename else f"error: {e}", file=sys.stderr)
        return 2
    except RunInterrupted as e:
        print(f"stopped by {e}; continue with: python train.py --resume {run.logdir}", file=sys.stderr)
        return e.exit_status
    except KeyboardInterrupt:
        print("stopped at once, without a checkpoint; continue from the last one with: python train.py --resume "
              "RUN_DIR", file=sys.stderr)
        return 130
    print(f"done: {result['env_steps']} env steps, {result['episodes']} episodes, "
          f"eval return {result['eval_return']:.2f}; logs and checkpoints in {run.logdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
