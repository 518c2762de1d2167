#!/usr/bin/env bash
# The four-turn teachers' last steps planned again on chains that go on (issue 13; docs/npmp.md, "Teachers that do
# not see their chain end"). The planner shortens its 1.8 s horizon to the steps the episode has left
# (agents/mpc.py), so over the last 60 frames of every kept four-turn run it planned for a reference that ends: no
# rollout is scored past that end, and nothing asks the walker to stay up after it. Every student is taught those
# frames, and the students fit them worst and fall there. This recipe plans each sixteen four-turn sequence's
# favourite five-turn child (data/mocap/cmu_turn_chains5.h5, as clip_teachers_five.sh) from its parent's kept run,
# branched about 52 frames before the parent's end, so the parent's last frames are planned with the whole horizon
# on a chain that goes on; the re-planned part follows the walker (`follow_walker`: the kept runs went blind there,
# docs/npmp.md "Teachers that lose the pace"). Then the sixteen laws' rollouts, and a student continued on them from
# INIT in place of the four-turn chains; a child whose planned run fell before its chain's end is left out and its
# parent's rollouts in KEPT_DATA taught instead (compare with c_s1 of clip_teachers_paced.sh: the same init, steps
# and seed on KEPT_DATA, the sixteen kept laws' rollouts, clip_teachers_paced.sh's WORKDIR/kept.h5).
#
#   pipelines/npmp/recipes/clip_teachers_tail.sh WORKDIR INIT KEPT_DATA [TRAJECTORIES] [STEPS] [SEED]
#
# Writes WORKDIR/tail.h5 (each child's law with TRAJECTORIES rollouts, default 30, seed 80; planning takes about 7
# minutes a chain on one core, the sixteen 50 minutes on two processes; the fourteen kept in data/teachers/
# clip_tail.h5 are not planned again), WORKDIR/tm.h5 (merged with KEPT_DATA) and WORKDIR/t_sSEED
# (STEPS distillation steps from INIT, default 600, seed SEED, default 1). Resumable: a collection keeps its
# finished chains, a stage whose output exists is skipped.
set -euo pipefail
cd "$(dirname "$0")/../../.."
USAGE="usage: clip_teachers_tail.sh WORKDIR INIT KEPT_DATA [TRAJECTORIES] [STEPS] [SEED]"
W=${1:?$USAGE}; INIT=${2:?$USAGE}; KEPT_DATA=${3:?$USAGE}
TRAJ=${4:-30}; STEPS=${5:-600}; SEED=${6:-1}
PY=${PYTHON:-.venv/bin/python}
[ -e "$INIT/meta.json" ] || { echo "error: no primitives in $INIT"; exit 2; }
[ -e "$KEPT_DATA" ] || { echo "error: no data $KEPT_DATA (clip_teachers_paced.sh writes WORKDIR/kept.h5)"; exit 2; }
mkdir -p "$W"
say() { echo "[$(date +%H:%M:%S)] $*"; }

MOCAP=data/mocap/cmu_turn_chains5.h5
KEPT="data/teachers/clip_chains_shaped.h5 data/teachers/clip_seqs_shaped.h5"
TAIL=data/teachers/clip_tail.h5   # the fourteen runs that reached their end, kept: used instead of planning
declare -A PARENT=([LLLL]=seqLLLL [LLLR]=pairJ [LLRL]=seqLLRL [LLRR]=seqLLRR [LRLL]=seqLRLL [LRLR]=pairH
                   [LRRL]=pairE [LRRR]=seqLRRR [RLLL]=seqRLLL [RLLR]=pairF [RLRL]=seqRLRL [RLRR]=seqRLRR
                   [RRLL]=pairG [RRLR]=seqRRLR [RRRL]=seqRRRL [RRRR]=pairI)
# each parent's favourite fifth turn (clip_teachers_five.sh), branched 30 frames earlier than that recipe did
# (46 frames before the child parts from its parent); pairJ's child from 120 as there
declare -A BRANCH=([LLLLL]=112 [LLLRL]=120 [LLRLL]=136 [LLRRR]=124 [LRLLL]=136 [LRLRR]=148 [LRRLL]=136
                   [LRRRR]=124 [RLLLL]=140 [RLLRL]=152 [RLRLL]=164 [RLRRR]=152 [RRLLL]=140 [RRLRR]=152
                   [RRRLL]=140 [RRRRR]=128)
SNIPPETS=""; BRANCHES=()
for s in "${!BRANCH[@]}"; do
  SNIPPETS+=" seq$s"
  BRANCHES+=(--branch "seq$s=${PARENT[${s:0:4}]}:${BRANCH[$s]}")
done
if [ ! -e "$W/tail.h5" ]; then
  say "the sixteen children planned from their parents' kept runs, their laws and rollouts"
  $PY -m pipelines.npmp collect --experts mpc --expert-policy lqr --lqr-set follow_walker=true \
    --planner-set root_orientation_weight=0.2 --planner-set follow_walker=true --branch-across-settings \
    --ending fall --perturbation-trajectories 3 --action-noise 0.03 --mocap "$MOCAP" --processes 2 \
    --trajectories "$TRAJ" --seed 80 --plan-from $([ -e "$TAIL" ] && echo "$TAIL") $KEPT "${BRANCHES[@]}" \
    --snippets $SNIPPETS --data "$W/tail.h5"
fi
if [ ! -e "$W/tm.h5" ]; then
  $PY -m pipelines.npmp merge "$W/tail.h5" "$KEPT_DATA" --mixed-planners --mixed-rounds --out "$W/tm.h5"
fi
# each child whose planned run reached its chain's end, else its parent
TAUGHT=$(for s in "${!BRANCH[@]}"; do echo "seq$s ${PARENT[${s:0:4}]}"; done | $PY -c "
import sys, h5py
from envs.mocap.tracking import reference_playback
with h5py.File('$W/tail.h5', 'r') as f:
    for child, parent in (line.split() for line in sys.stdin):
        whole = len(f[child]['plan/commands']) == len(reference_playback(child, 0, '$MOCAP').states) - 1
        print(child if whole else parent)")
if [ ! -e "$W/t_s$SEED/meta.json" ]; then
  say "distill t_s$SEED ($STEPS steps) on" $TAUGHT
  $PY -m pipelines.npmp distill --data "$W/tm.h5" --init "$INIT" --snippets $TAUGHT --lr 3e-4 \
    --lr-schedule cosine --windows snippets --distill-steps "$STEPS" --seed "$SEED" --out "$W/t_s$SEED"
fi
say done
