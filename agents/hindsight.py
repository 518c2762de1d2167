"""Hindsight relabelling for the moving-target task (Andrychowicz et al. 2017, "Hindsight Experience Replay";
EXTERNAL: none of the seeds uses it). A departure from seed 000 §8.4, whose high level learns from the task's own
reward alone, taken because that reward is too rare at this machine's budgets: on ``humanoid`` a high level that
chooses clips reaches about 0.1 targets per episode by chance, so a 60 000-step run holds some 50 rewarded episodes
among ~2 000 decisions, too few to learn which turn leads where (docs/npmp.md, "A high level that learns, in part").

A finished episode is replayed again with the target moved to places the walker did pass: ``goals`` points of its
root's path at least ``min_distance`` from where it started (as the task's respawns are), each a relabelled copy of
the episode from its first decision up to the decision whose segment first brings the root within the task's
tolerance of that goal. The copy's task features are what the walker would have seen of a target there
(``envs.locomotion.relabelled_features``, from the root pose after each decision), its reward is the task's (1 per
step on target, at most ``STEPS_BEFORE_RESPAWN``: the target would have moved on) on that last decision and 0 before,
and it ends there as a terminal step (where the real task would draw a new target). The goal's height is the real
target's (its sites all lie at one height). Every decision the walker took then has an outcome, rewarded or not, for
many targets; Q-learning is off-policy, so these transitions are as valid as the real ones for the real reward.

Needs ``info["start_pose"]``, ``info["root_path"]`` and ``info["root_pose"]`` on every step
(``priors.reuse.ClipChoiceActionEnv`` on ``envs.locomotion`` tasks); episodes without them are not relabelled.
"""
from __future__ import annotations

import numpy as np

from envs.locomotion import STEPS_BEFORE_RESPAWN, relabelled_features, steps_on_target, target_of_features

__all__ = ["relabel_episode"]


def relabel_episode(first_obs: np.ndarray, steps: list, task: slice, goals: int, rng: np.random.Generator,
                    min_distance: float = 2.0) -> list[tuple[np.ndarray, list[tuple]]]:
    """Up to ``goals`` relabelled copies of one finished episode (module docstring). ``first_obs``: its first flat
    observation; ``steps``: its transitions (``action``, ``log_prob``, ``reward``, ``terminated``, ``obs``, ``over``,
    ``info``; agents/actors.py ``Transition``); ``task``: the slice of the flat observation holding the task
    features. Returns [(first flat observation, [(action, log_prob, reward, terminated, next obs, over), ...])]."""
    if goals <= 0 or not steps or not all("root_path" in s.info and "root_pose" in s.info for s in steps):
        return []
    start_pose = np.asarray(steps[0].info["start_pose"])
    height = target_of_features(start_pose, first_obs[task])[2]
    path = np.concatenate([np.asarray(s.info["root_path"]) for s in steps])
    far = np.flatnonzero(np.linalg.norm(path[:, :2] - start_pose[:2], axis=1) >= min_distance)
    if far.size == 0:
        return []
    copies = []
    for index in rng.choice(far, size=min(goals, far.size), replace=False):
        goal = np.array([path[index, 0], path[index, 1], height])
        on = [steps_on_target(s.info["root_path"], goal) for s in steps]
        last = next(i for i, hits in enumerate(on) if hits.any())
        first = np.array(first_obs, np.float32)
        first[task] = relabelled_features(start_pose, goal)
        rows = []
        for i, s in enumerate(steps[:last + 1]):
            obs = np.array(s.obs, np.float32)
            obs[task] = relabelled_features(s.info["root_pose"], goal)
            reached = i == last
            reward = float(min(on[i].sum(), STEPS_BEFORE_RESPAWN)) if reached else 0.0
            rows.append((s.action, s.log_prob, reward, reached, obs, reached))
        copies.append((first, rows))
    return copies
