#!/usr/bin/env bash
# Chains one turn longer: the clip primitives taught sequences of five turns (issue 13; docs/npmp.md, "Chains one
# turn longer"). Through the shipped set, most `humanoid` episodes under the scripted `nearest` choice fall in the
# last 60 steps of the four-turn chain they walk, or just after its end; this tests whether that is because the
# students were taught no further (measured: it is not, a student of this recipe falls at the same place). It
# writes 18 chains of five turns (data/mocap/cmu_turn_chains5.h5: each four-turn sequence with the fifth turn
# `nearest` chose most often after it, and the second most often after the two sequences it chose most), plans
# each one branched from its four-turn parent's kept run (data/teachers/clip_*_shaped.h5), collects the laws'
# rollouts and continues a student on them with the four-turn chains' data.
#
#   pipelines/npmp/recipes/clip_teachers_five.sh WORKDIR DATA INIT [TRAJECTORIES] [STEPS]
#
# DATA: the sixteen four-turn chains' data (law rollouts and DAgger rounds, e.g. WORKDIR/q1.h5 of
# clip_teachers_seqs.sh with seqRRRL's law collected again, docs/npmp.md); INIT: the student to continue.
# Writes WORKDIR/c5.h5 (each chain's law with TRAJECTORIES rollouts, default 30, seed 80; planning a chain takes
# about 6-10 minutes on one core, all 18 on two processes 66 minutes; the runs kept in
# data/teachers/clip_seqs5_shaped.h5 are used instead where it exists), WORKDIR/fm.h5 (merged with DATA) and
# WORKDIR/f_s1 (STEPS distillation steps from INIT, default 600, seed 1; the distillation draws each chain equally
# often, so the new chains' 30 rollouts weigh as much as the older chains' hundreds). Resumable: stages whose output
# exists are skipped, a collection keeps its finished chains.
set -euo pipefail
cd "$(dirname "$0")/../../.."
USAGE="usage: clip_teachers_five.sh WORKDIR DATA INIT [TRAJECTORIES] [STEPS]"
W=${1:?$USAGE}; DATA=${2:?$USAGE}; INIT=${3:?$USAGE}
TRAJ=${4:-30}; STEPS=${5:-600}
PY=${PYTHON:-.venv/bin/python}
[ -e "$DATA" ] || { echo "error: no data $DATA"; exit 2; }
[ -e "$INIT/meta.json" ] || { echo "error: no primitives in $INIT"; exit 2; }
mkdir -p "$W"
say() { echo "[$(date +%H:%M:%S)] $*"; }

L=16_27-0; R=16_27-0-mirror
MOCAP=data/mocap/cmu_turn_chains5.h5
KEPT="data/teachers/clip_chains_shaped.h5 data/teachers/clip_seqs_shaped.h5"
FIVE=data/teachers/clip_seqs5_shaped.h5
# four-turn sequence -> its kept run's name
declare -A PARENT=([LLLL]=seqLLLL [LLLR]=pairJ [LLRL]=seqLLRL [LLRR]=seqLLRR [LRLL]=seqLRLL [LRLR]=pairH
                   [LRRL]=pairE [LRRR]=seqLRRR [RLLL]=seqRLLL [RLLR]=pairF [RLRL]=seqRLRL [RLRR]=seqRLRR
                   [RRLL]=pairG [RRLR]=seqRRLR [RRRL]=seqRRRL [RRRR]=pairI)
TURNS="LLLLL LLLRL LLLRR LLRLL LLRRR LRLLL LRLRR LRRLL LRRRR RLLLL RLLRL RLRLL RLRRR RRLLL RRLRR RRRLL RRRLR RRRRR"
# the branch points: 16 frames before each chain parts from its parent (7 frames, the blend, before the parent's
# reference ends), so that only the added turn and the parent's last steps, which saw its reference end, are
# planned; pairJ's two children from 120 instead: branched that late, their laws brought 13 and 12 of 30 rollouts to
# the end (pairJ's run was not made to go on past its end), from 120 30 and 24
declare -A BRANCH=([LLLLL]=142 [LLLRL]=120 [LLLRR]=120 [LLRLL]=166 [LLRRR]=154 [LRLLL]=166 [LRLRR]=178 [LRRLL]=166
                   [LRRRR]=154 [RLLLL]=170 [RLLRL]=182 [RLRLL]=194 [RLRRR]=182 [RRLLL]=170 [RRLRR]=182 [RRRLL]=170
                   [RRRLR]=170 [RRRRR]=158)
SNIPPETS=""; CHAINS=(); BRANCHES=()
for s in $TURNS; do
  spec="seq$s=$L:20"
  for ((i = 0; i < 5; i++)); do [ "${s:$i:1}" = L ] && spec+=",$L" || spec+=",$R"; done
  CHAINS+=(--chain "$spec"); SNIPPETS+=" seq$s"
  BRANCHES+=(--branch "seq$s=${PARENT[${s:0:4}]}:${BRANCH[$s]}")
done
if [ ! -e "$MOCAP" ]; then
  say chains
  $PY -m pipelines.npmp chain --blend 7 --mocap data/mocap/cmu_turns.h5 --out "$MOCAP" "${CHAINS[@]}"
fi
LAW="--experts mpc --expert-policy lqr --lqr-set follow_walker=true --planner-set root_orientation_weight=0.2
     --ending fall --perturbation-trajectories 3 --action-noise 0.03 --mocap $MOCAP --processes 2"
if [ ! -e "$W/c5.h5" ]; then   # a kept run is used where FIVE holds it with the same branch point, else planned
  say "the 18 chains' laws and rollouts"
  $PY -m pipelines.npmp collect $LAW --trajectories "$TRAJ" --seed 80 --plan-from $([ -e "$FIVE" ] && echo "$FIVE") \
    $KEPT "${BRANCHES[@]}" --snippets $SNIPPETS --data "$W/c5.h5"
fi
if [ ! -e "$W/fm.h5" ]; then
  say merge
  $PY -m pipelines.npmp merge "$DATA" "$W/c5.h5" --mixed-rounds --out "$W/fm.h5"
fi
if [ ! -e "$W/f_s1/meta.json" ]; then
  say "distill $STEPS steps"
  FOUR="pairE pairF pairG pairH pairI pairJ seqLLLL seqLLRL seqLLRR seqLRLL seqLRRR seqRLLL seqRLRL seqRLRR seqRRLR
        seqRRRL"
  $PY -m pipelines.npmp distill --data "$W/fm.h5" --init "$INIT" --snippets $FOUR $SNIPPETS --lr 3e-4 \
    --lr-schedule cosine --windows snippets --distill-steps "$STEPS" --seed 1 --out "$W/f_s1"
fi
say done
