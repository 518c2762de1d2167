# Sourced by the clip recipes (clip_teachers_shaped.sh, clip_teachers_seqs.sh): a student distilled from INIT on
# DATA, then DAgger rounds, each RELABELLED noisy rollouts per snippet of the last student relabelled by the laws
# and 600 steps of distillation continued from it. Writes WORKDIR/X0_s1, then WORKDIR/Xk.h5 and WORKDIR/Xk_s1 per
# round k; every stage whose output is whole is skipped, so a rerun continues where it stopped.
#
#   dagger_rounds WORKDIR X DATA INIT ROUNDS RELABELLED FIRST_SEED SNIPPET...
# (needs PY and say from the recipe; round k's rollouts are drawn from seed FIRST_SEED + k)

distilled() {   # a distillation saves every 500 steps: only the last save is the whole run
  $PY -c "import json, sys; sys.exit(json.load(open('$1/meta.json')).get('steps') != 600)" 2>/dev/null
}

dagger_rounds() {
  local w=$1 x=$2 data=$3 init=$4 rounds=$5 relabelled=$6 first_seed=$7
  shift 7
  local distill="--snippets $* --distill-steps 600 --lr 3e-4 --lr-schedule cosine --windows snippets --seed 1"
  if ! distilled "$w/${x}0_s1"; then
    say "distill ${x}0_s1"
    $PY -m pipelines.npmp distill --data "$data" --init "$init" $distill --out "$w/${x}0_s1"
  fi
  local k prev
  for k in $(seq 1 "$rounds"); do
    prev="$w/${x}$((k - 1))_s1"
    if [ ! -e "$w/$x$k.h5" ]; then
      say "relabel round $k"
      $PY -m pipelines.npmp relabel --data "$data" --primitives "$prev" --out "$w/$x$k.h5" --snippets "$@" \
        --labeller collected --ending fall --trajectories "$relabelled" --action-noise 0.03 --processes 2 \
        --seed $((first_seed + k))
    fi
    if ! distilled "$w/$x${k}_s1"; then
      say "distill $x${k}_s1"
      $PY -m pipelines.npmp distill --data "$w/$x$k.h5" --init "$prev" $distill --out "$w/$x${k}_s1"
    fi
    data="$w/$x$k.h5"
  done
}
