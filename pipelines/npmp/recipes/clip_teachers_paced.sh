#!/usr/bin/env bash
# Teachers that keep the pace, and a student of them against one of the teachers they replace (issue 13;
# docs/npmp.md, "Teachers that lose the pace"). Ten of the sixteen kept four-turn runs (data/teachers/clip_*_shaped.h5)
# went blind: once the walker trails the reference by about a metre, every rollout's tracking error passes the
# termination threshold, its reward is masked, and the planner plans on heading alone, walking the clip's rhythm on
# half the ground. This plans those ten again from their kept runs before they went blind, with the planner that
# follows the walker (--planner-set follow_walker=true; collect --branch-across-settings), collects every chain's law
# rollouts, and distils two students from INIT on the same sixteen chains: one taught the ten new runs (p_s1), one the
# runs they replace (c_s1, the control); everything else alike.
#
#   pipelines/npmp/recipes/clip_teachers_paced.sh WORKDIR INIT [TRAJECTORIES] [STEPS]
#
# Writes WORKDIR/paced.h5 (the ten new runs' laws, TRAJECTORIES noisy rollouts each, default 30, seed 80; planning
# takes about 15 minutes a chain on one core, the ten on two processes about 75; the runs kept in
# data/teachers/clip_paced.h5 are used instead where it exists), WORKDIR/kept.h5 (the sixteen kept runs' laws, the
# same rollouts, seed 90), WORKDIR/new.h5 (paced.h5 over kept.h5) and the students WORKDIR/p_s1, WORKDIR/c_s1 (STEPS
# distillation steps from INIT, default 600, seed 1). Resumable: stages whose output exists are skipped, a collection
# keeps its finished chains. Then rank the two halved students on the same noisy episodes (docs/npmp.md).
set -euo pipefail
cd "$(dirname "$0")/../../.."
USAGE="usage: clip_teachers_paced.sh WORKDIR INIT [TRAJECTORIES] [STEPS]"
W=${1:?$USAGE}; INIT=${2:?$USAGE}
TRAJ=${3:-30}; STEPS=${4:-600}
PY=${PYTHON:-.venv/bin/python}
[ -e "$INIT/meta.json" ] || { echo "error: no primitives in $INIT"; exit 2; }
mkdir -p "$W"
say() { echo "[$(date +%H:%M:%S)] $*"; }

MOCAP=data/mocap/cmu_turn_chains.h5
KEPT="data/teachers/clip_chains_shaped.h5 data/teachers/clip_seqs_shaped.h5"
PACED=data/teachers/clip_paced.h5
ALL="pairE pairF pairG pairH pairI pairJ seqLLLL seqLLRL seqLLRR seqLRLL seqLRRR seqRLLL seqRLRL seqRLRR seqRRLR seqRRRL"
LAW="--experts mpc --expert-policy lqr --lqr-set follow_walker=true --planner-set root_orientation_weight=0.2
     --ending fall --perturbation-trajectories 3 --action-noise 0.03 --mocap $MOCAP --trajectories $TRAJ"
# each blind run branches from a kept run that is the same run up to 20-40 frames before it went blind (a parent,
# or a sibling branched from it later); a collection's --plan-from must not hold the chains it plans, so the ten go
# in two halves, each with the kept runs it branches from written to a file of its own
HALF_A="pairE pairF pairI seqRRLR seqRRRL"
BRANCH_A="--branch pairE=seqLRRR:135 --branch pairF=seqRLRL:117 --branch pairI=pairG:90 --branch seqRRLR=pairG:90
          --branch seqRRRL=pairG:90"
PARENTS_A="seqLRRR seqRLRL pairG"
HALF_B="seqLRRR seqRLRL seqRLRR seqRLLL pairG"
BRANCH_B="--branch seqLRRR=pairE:135 --branch seqRLRL=pairF:117 --branch seqRLRR=pairF:117 --branch seqRLLL=pairF:117
          --branch pairG=pairF:71"
PARENTS_B="pairE pairF"
plan_half() {   # NAME SNIPPETS BRANCHES PARENTS
  [ -e "$W/paced_$1.h5" ] && return 0
  $PY -m pipelines.npmp teachers $KEPT --snippets $4 --mocap $MOCAP --out "$W/parents_$1.h5"
  $PY -m pipelines.npmp collect $LAW --planner-set follow_walker=true --branch-across-settings --seed 80 \
    --processes 1 --plan-from $([ -e "$PACED" ] && echo "$PACED") "$W/parents_$1.h5" $3 --snippets $2 \
    --data "$W/paced_$1.h5" > "$W/paced_$1.log" 2>&1
}
if [ ! -e "$W/paced.h5" ]; then
  say "the ten blind chains planned again, two processes (logs: $W/paced_a.log, paced_b.log)"
  plan_half a "$HALF_A" "$BRANCH_A" "$PARENTS_A" & A=$!
  plan_half b "$HALF_B" "$BRANCH_B" "$PARENTS_B" & B=$!
  wait $A || { echo "error: half a failed, see $W/paced_a.log (rerun to resume)"; exit 2; }
  wait $B || { echo "error: half b failed, see $W/paced_b.log (rerun to resume)"; exit 2; }
  $PY -m pipelines.npmp merge "$W/paced_a.h5" "$W/paced_b.h5" --mixed-rounds --out "$W/paced.h5"
fi
if [ ! -e "$W/kept.h5" ]; then
  say "the sixteen kept runs' laws"
  $PY -m pipelines.npmp collect $LAW --seed 90 --processes 2 --plan-from $KEPT --snippets $ALL --data "$W/kept.h5"
fi
if [ ! -e "$W/new.h5" ]; then
  $PY -m pipelines.npmp merge "$W/paced.h5" "$W/kept.h5" --overlay --mixed-planners --mixed-rounds --out "$W/new.h5"
fi
D="--snippets $ALL --lr 3e-4 --lr-schedule cosine --windows snippets --distill-steps $STEPS --seed 1"
for pair in "p_s1 new.h5" "c_s1 kept.h5"; do
  set -- $pair
  if [ ! -e "$W/$1/meta.json" ]; then
    say "distill $1 ($STEPS steps on $2)"
    $PY -m pipelines.npmp distill --data "$W/$2" --init "$INIT" $D --out "$W/$1"
  fi
done
say done
