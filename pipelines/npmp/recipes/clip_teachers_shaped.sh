#!/usr/bin/env bash
# The clip primitives' teachers planned with heading shaping, their rollouts, and a student continued from the
# clip primitives in INIT (default data/primitives/npmp-clips) with DAgger rounds (issue 13; docs/npmp.md, "The
# teachers spin at the joins", "Students of the re-planned teachers"). The set shipped on 2026-12-02 is this
# recipe's r4_s1, continued from the set shipped before it (git show 96ce070:data/primitives/npmp-clips/meta.json
# and .../weights.safetensors into a directory D, INIT=D). The set shipped since 2026-12-03 continues this recipe's
# r3_s1 (run with INIT = the 2026-12-02 set, git show f4d304f:...) in clip_teachers_seqs.sh W 3 1: its q1_s1.
# Resumable: every stage whose output exists is skipped, and collect/relabel keep their finished snippets, so
# running it again after a stop continues where it stopped.
#
#   pipelines/npmp/recipes/clip_teachers_shaped.sh WORKDIR [ROUNDS] [pairs|all]
#
# ROUNDS: DAgger rounds (default 4, as the shipped set, halved with `python -m pipelines.npmp half`).
# pairs (the default): the six chains pairE-pairJ, as the shipped clip primitives;
# all: the ten other sequences of four turns too (seqLLLL-seqRRRL, kept in data/teachers/clip_seqs_shaped.h5, each
# branched from the pair it shares the most turns with; where that file lacks some, all ten are collected into
# WORKDIR/seqs.h5, the kept runs used as they are and the missing ones planned).
# One WORKDIR per set: its files do not say which set they hold.
#
# The six chains' planned runs are kept in the repository (data/teachers/clip_chains_shaped.h5, written by
# `python -m pipelines.npmp teachers`) on the chains' mocap (data/mocap/cmu_turn_chains.h5): planning them again
# takes about 95 minutes on 2 cores, so it is done only where that file is missing (into WORKDIR/e.h5 and
# WORKDIR/tree/{f,g,h,i,j}.h5). Then WORKDIR/r.h5 (270 law rollouts per chain), r0_s1 (the shipped student distilled
# on them) and rK.h5 / rK_s1 per DAgger round: on 2 cores 17-42 minutes, 6-10 and 13-22 each (runs/s4 and runs/s6,
# docs/npmp.md). Run nothing else beside it: a distillation beside a relabelling or another distillation ran at
# 0.2 steps/s here, against 1.0 alone.
set -euo pipefail
cd "$(dirname "$0")/../../.."
W=${1:?usage: clip_teachers_shaped.sh WORKDIR [ROUNDS] [pairs|all]}
ROUNDS=${2:-4}
SET=${3:-pairs}
case "$SET" in pairs|all) ;; *) echo "error: the chains are 'pairs' or 'all', got '$SET'"; exit 2;; esac
PY=${PYTHON:-.venv/bin/python}
INIT=${INIT:-data/primitives/npmp-clips}
[ -e "$INIT/meta.json" ] || { echo "error: no primitives in INIT=$INIT"; exit 2; }
mkdir -p "$W/tree"
say() { echo "[$(date +%H:%M:%S)] $*"; }

L=16_27-0; R=16_27-0-mirror
C="pairE pairF pairG pairH pairI pairJ"
MOCAP=data/mocap/cmu_turn_chains.h5
TEACHERS=data/teachers/clip_chains_shaped.h5
if [ ! -e "$MOCAP" ]; then
  say chains
  $PY -m pipelines.npmp chain --blend 7 --mocap data/mocap/cmu_turns.h5 --out "$MOCAP" \
    --chain pairE=$L:20,$L,$R,$R,$L --chain pairF=$L:20,$R,$L,$L,$R --chain pairG=$L:20,$R,$R,$L,$L \
    --chain pairH=$L:20,$L,$R,$L,$R --chain pairI=$L:20,$R,$R,$R,$R --chain pairJ=$L:20,$L,$L,$L,$R \
    --chain seqLLLL=$L:20,$L,$L,$L,$L --chain seqLLRL=$L:20,$L,$L,$R,$L --chain seqLLRR=$L:20,$L,$L,$R,$R \
    --chain seqLRLL=$L:20,$L,$R,$L,$L --chain seqLRRR=$L:20,$L,$R,$R,$R --chain seqRLLL=$L:20,$R,$L,$L,$L \
    --chain seqRLRL=$L:20,$R,$L,$R,$L --chain seqRLRR=$L:20,$R,$L,$R,$R --chain seqRRLR=$L:20,$R,$R,$L,$R \
    --chain seqRRRL=$L:20,$R,$R,$R,$L
fi

# the planner with heading shaping; each chain's run branches from the run it shares its start with
# (branch points since 2026-12-02: those whose laws do not fork, docs/npmp.md "Where the teachers' laws fall";
# the planner is deterministic, so the same branch point plans the same run)
PLAN="--experts mpc --expert-policy lqr --lqr-set follow_walker=true --planner-set root_orientation_weight=0.2
      --ending fall --trajectories 30 --perturbation-trajectories 3 --action-noise 0.03 --seed 80
      --mocap $MOCAP --processes 1"
plan() {   # OUT SNIPPET [PARENT_FILE BRANCH]
  [ -e "$1" ] && return 0
  say "plan $2 -> $1"
  if [ $# -gt 2 ]; then
    $PY -m pipelines.npmp collect $PLAN --snippets "$2" --plan-from "$3" --branch "$4" --data "$1" > "$1.log" 2>&1
  else
    $PY -m pipelines.npmp collect $PLAN --snippets "$2" --data "$1" > "$1.log" 2>&1
  fi
}
if [ -e "$TEACHERS" ]; then
  PLANS="$TEACHERS"
else
  plan "$W/e.h5" pairE
  plan "$W/tree/f.h5" pairF "$W/e.h5" pairF=pairE:8 & plan "$W/tree/h.h5" pairH "$W/e.h5" pairH=pairE:92 &
  plan "$W/tree/j.h5" pairJ "$W/e.h5" pairJ=pairE:55; wait
  plan "$W/tree/g.h5" pairG "$W/tree/f.h5" pairG=pairF:71
  plan "$W/tree/i.h5" pairI "$W/tree/g.h5" pairI=pairG:105
  PLANS="$W/e.h5 $W/tree/f.h5 $W/tree/g.h5 $W/tree/h.h5 $W/tree/i.h5 $W/tree/j.h5"
  for f in $PLANS; do [ -e "$f" ] || { echo "error: planning failed: $f.log"; exit 1; }; done
fi

SEQS="seqLLLL seqLLRL seqLLRR seqLRLL seqLRRR seqRLLL seqRLRL seqRLRR seqRRLR seqRRRL"
SEQ_TEACHERS=data/teachers/clip_seqs_shaped.h5
holds_all() {   # FILE SNIPPET...: whether FILE exists and holds a run of every SNIPPET
  $PY -c "import sys, h5py; f = h5py.File(sys.argv[1], 'r'); sys.exit(not all(s in f for s in sys.argv[2:]))" "$@" \
    2>/dev/null
}
if [ "$SET" = all ]; then
  C="$C $SEQS"
  if ! holds_all "$SEQ_TEACHERS" $SEQS; then   # about 30 minutes on 2 cores: each planned from its branch point on
    KEPT=""; [ -e "$SEQ_TEACHERS" ] && KEPT="$SEQ_TEACHERS"   # the runs kept so far are used, not planned again
    if [ ! -e "$W/seqs.h5" ]; then
      say "plan the ten other sequences -> $W/seqs.h5"
      $PY -m pipelines.npmp collect ${PLAN/--processes 1/--processes 2} --plan-from $PLANS $KEPT \
        --branch seqLLLL=pairJ:123 --branch seqLLRL=pairJ:80 --branch seqLLRR=pairJ:80 --branch seqLRLL=pairH:147 \
        --branch seqLRRR=pairE:135 --branch seqRLLL=pairF:151 --branch seqRLRL=pairF:117 \
        --branch seqRLRR=pairF:117 --branch seqRRLR=pairG:130 --branch seqRRRL=pairI:138 \
        --snippets $SEQS --data "$W/seqs.h5"
    fi
    SEQ_TEACHERS="$W/seqs.h5"
  fi
  PLANS="$PLANS $SEQ_TEACHERS"
fi

if [ ! -e "$W/r.h5" ]; then
  say rollouts
  $PY -m pipelines.npmp collect --experts mpc --expert-policy lqr --lqr-set follow_walker=true \
    --planner-set root_orientation_weight=0.2 \
    --plan-from $PLANS \
    --ending fall --trajectories 270 --perturbation-trajectories 3 --action-noise 0.03 --processes 2 --seed 90 \
    --mocap "$MOCAP" --data "$W/r.h5" --snippets $C
fi

. pipelines/npmp/recipes/dagger_rounds.sh
dagger_rounds "$W" r "$W/r.h5" "$INIT" "$ROUNDS" 25 610 $C
say done
