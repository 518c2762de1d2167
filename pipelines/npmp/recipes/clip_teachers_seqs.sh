#!/usr/bin/env bash
# The clip primitives continued on all sixteen sequences of four turns (issue 13; docs/npmp.md, "Three more DAgger
# rounds from the shipped set", "All sixteen sequences taught"). Under the scripted `nearest` choice on `humanoid`,
# 249 of 400 episodes walked a sequence of four turns that is none of the six pairs the set then shipped was
# taught, and those episodes fell within their four turns almost always; this recipe adds the ten other
# sequences' teachers (kept in data/teachers/clip_seqs_shaped.h5) to a student that clip_teachers_shaped.sh made on
# the six pairs. The shipped
# clip primitives (since 2026-12-03) are q1_s1 of `clip_teachers_seqs.sh W 3 1`, after
# `INIT=D clip_teachers_shaped.sh W 3` with D the set shipped on 2026-12-02 (git show f4d304f:data/primitives/
# npmp-clips/meta.json and .../weights.safetensors); a second round (q2_s1) was not better (docs/npmp.md).
#
#   pipelines/npmp/recipes/clip_teachers_shaped.sh WORKDIR PAIR_ROUNDS        # first: the six pairs
#   pipelines/npmp/recipes/clip_teachers_seqs.sh WORKDIR PAIR_ROUNDS [ROUNDS] [TRAJECTORIES] [RELABELLED]
#
# Reads WORKDIR/rP.h5 (the pairs' data after PAIR_ROUNDS rounds) and WORKDIR/rP_s1 (its student). Writes
# WORKDIR/q.h5 (TRAJECTORIES law rollouts per new sequence, default 90: a third of the pairs', to fit a session on
# 2 cores), WORKDIR/qm.h5 (merged with rP.h5), qK.h5 / qK_s1 per DAgger round on all sixteen (RELABELLED rollouts of
# the last student per sequence, default 15; ROUNDS default 2). Resumable as clip_teachers_shaped.sh is. On 2
# cores, nothing beside it: docs/npmp.md has the times.
set -euo pipefail
cd "$(dirname "$0")/../../.."
W=${1:?usage: clip_teachers_seqs.sh WORKDIR PAIR_ROUNDS [ROUNDS] [TRAJECTORIES] [RELABELLED]}
P=${2:?usage: clip_teachers_seqs.sh WORKDIR PAIR_ROUNDS [ROUNDS] [TRAJECTORIES] [RELABELLED]}
ROUNDS=${3:-2}
TRAJ=${4:-90}
RELABELLED=${5:-15}
PY=${PYTHON:-.venv/bin/python}
for f in "$W/r$P.h5" "$W/r${P}_s1/meta.json"; do
  [ -e "$f" ] || { echo "error: no $f (run pipelines/npmp/recipes/clip_teachers_shaped.sh $W $P first)"; exit 2; }
done
say() { echo "[$(date +%H:%M:%S)] $*"; }

MOCAP=data/mocap/cmu_turn_chains.h5
PAIRS="pairE pairF pairG pairH pairI pairJ"
SEQS="seqLLLL seqLLRL seqLLRR seqLRLL seqLRRR seqRLLL seqRLRL seqRLRR seqRRLR seqRRRL"
if [ ! -e "$W/q.h5" ]; then
  say "rollouts of the ten sequences"
  $PY -m pipelines.npmp collect --experts mpc --expert-policy lqr --lqr-set follow_walker=true \
    --planner-set root_orientation_weight=0.2 \
    --plan-from data/teachers/clip_chains_shaped.h5 data/teachers/clip_seqs_shaped.h5 \
    --ending fall --trajectories "$TRAJ" --perturbation-trajectories 3 --action-noise 0.03 --processes 2 --seed 90 \
    --mocap "$MOCAP" --data "$W/q.h5" --snippets $SEQS
fi
if [ ! -e "$W/qm.h5" ]; then
  say merge
  $PY -m pipelines.npmp merge "$W/r$P.h5" "$W/q.h5" --mixed-rounds --out "$W/qm.h5"
fi

. pipelines/npmp/recipes/dagger_rounds.sh
dagger_rounds "$W" q "$W/qm.h5" "$W/r${P}_s1" "$ROUNDS" "$RELABELLED" 710 $PAIRS $SEQS
say done
