#!/usr/bin/env bash
# Seed 000 §8's experiment, end to end: the PP receive deferred until first use (patch 0005), found with the
# per-step rank trace (patch 0004) and proven with the method. docs/experiments/pp-receive.md says what each step
# shows and what it showed here.
#
#   docs/experiments/pp-receive.sh before [HOST=<inventory host>] [A=<profile>] [WORKLOAD=<name>]
#       A deployed and captured under the workload: what its rank trace shows, to write the predictions from.
#   docs/experiments/pp-receive.sh run PREDICT_C1='tpot_ms down >= <n>% at c1'
#                                  PREDICT_C4='output_tok_s up >= <n>% at c4' [ROUNDS=<n>] [HYPOTHESIS='...']
#                                  [HOST=..] [A=<profile>] [B=..] [C=..] [D=..] [SECOND=<C's variable>]
#                                  [WORKLOAD=<name>] [RUNS=<n>] [KEEP=<dir>]
#       The seed's two predictions written down first (TPOT at concurrency 1, throughput at concurrency 4); A and B
#       captured with the trace on, and nothing measured unless every stage recorded its spans on the runner in
#       force; validate; then, with the trace off (serving/config/untraced.py), the order A B B A (and C D D C)
#       repeated ROUNDS times, each bench from its own deploy; the A/B compare against each prediction, and the
#       2x2. C=none D=none: no second change (an engine that cannot carry one, as the stand-in, which runs eager):
#       A/B only, and the 2x2 said skipped. What it found is kept as small files in KEEP (default
#       docs/experiments/pp-receive/<UTC date>[-<HOST>]/), to commit beside the page; every command's whole output
#       stays in runs/experiments/pp-receive-<ts>/.
#
# A: the engine as vLLM orders it; B: A with REFDEPLOY_PP_DEFER_RECV=1; C: A with the second change (here the
# forward compiled); D: both. Each with probes.rank_trace: true (the benches run their untraced copies). Defaults:
# the cpu-tiny-pp2 profiles on this machine. On a 3090 host, copy rtx3090-pp3 into four profiles the same way (the
# env variable in B and D; the second change in C and D) and pass HOST= and their names, with SECOND= the second
# change's variable.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-}
case "$mode" in before | run) shift ;; *) echo "pp-receive.sh: say 'before' or 'run' first (the header says what each does)" >&2; exit 2 ;; esac
for arg in "$@"; do
  case "$arg" in
    # Shell variables, not exported: make reads A, B, C, D from the environment (make compare's designs), and
    # each make below is given what it takes on its command line.
    HOST=* | A=* | B=* | C=* | D=* | SECOND=* | WORKLOAD=* | RUNS=* | ROUNDS=* | KEEP=* | PREDICT_C1=* | PREDICT_C4=* \
      | HYPOTHESIS=*) declare "${arg?}" ;;
    *) echo "pp-receive.sh: unknown argument '$arg' (give NAME=value: HOST A B C D SECOND WORKLOAD RUNS ROUNDS KEEP PREDICT_C1 PREDICT_C4 HYPOTHESIS)" >&2; exit 2 ;;
  esac
done
A=${A:-cpu-tiny-pp2} B=${B:-cpu-tiny-pp2-deferred} C=${C:-cpu-tiny-pp2-compiled} D=${D:-cpu-tiny-pp2-compiled-deferred}
SECOND=${SECOND:-enforce_eager}
WORKLOAD=${WORKLOAD:-smoke}
if { [ "$C" = none ] && [ "$D" != none ]; } || { [ "$C" != none ] && [ "$D" = none ]; }; then
  echo "pp-receive.sh: C=$C D=$D: give both profiles of the second change, or C=none D=none for none" >&2; exit 2
fi
HOSTARG=${HOST:+HOST=$HOST}
ROUNDS=${ROUNDS:-1}
if ! [[ "$ROUNDS" =~ ^[1-9][0-9]?$ ]]; then
  echo "pp-receive.sh: ROUNDS=$ROUNDS: give how many times to run the A B B A order, 1 to 99" >&2; exit 2
fi
if [ "$mode" = run ]; then
  # The seed's two predictions (§8, §13): per-token time at concurrency 1, throughput at concurrency 4.
  if ! [[ "${PREDICT_C1:-}" =~ ^tpot_ms\ .*\ at\ c1$ ]] || ! [[ "${PREDICT_C4:-}" =~ ^output_tok_s\ .*\ at\ c4$ ]]; then
    echo "pp-receive.sh run: give PREDICT_C1='tpot_ms down >= <n>% at c1' and PREDICT_C4='output_tok_s up >= <n>% at c4'," \
      "written from what 'before' showed" >&2; exit 2
  fi
fi
HYPOTHESIS=${HYPOTHESIS:-a non-first stage waits for the previous stage before it prepares its inputs; preparing first overlaps that work with the previous stage}
log=runs/experiments/pp-receive-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$log"
echo "pp-receive: every command's output in $log/"

step() {  # step NAME make ARGS...: run one make command, its output kept, stop on failure
  local name=$1; shift
  echo "pp-receive: $name: $*" >&2
  if ! "$@" >"$log/$name.log" 2>&1; then
    tail -n 20 "$log/$name.log" >&2
    echo "pp-receive: $name failed; its output is $log/$name.log" >&2
    exit 1
  fi
}
printed() {  # printed NAME PATTERN: the path this step printed (Ansible may fold a long line)
  tr -d ' \n' <"$log/$1.log" | grep -oP "$2" | tail -n 1
}
deploy() {  # deploy NAME PROFILE: a new container of PROFILE (a restart when it already runs)
  step "$1" make deploy $HOSTARG PROFILE="$2" ANSIBLE_ARGS='-e serve_force_replace=true'
}
bench() {  # bench NAME PROFILE: one bench of the profile just deployed; prints its directory
  step "$1" make bench $HOSTARG PROFILE="$2" WORKLOAD="$WORKLOAD" ${RUNS:+RUNS=$RUNS}
  printed "$1" 'report:\K.*?(?=/report\.txt)' | sed 's#/bench$##'
}
trace() {  # trace NAME PROFILE: a capture under the workload, then each rank's figures from its steps; stops
           # unless every stage recorded its spans and named its model runner
  step "$1" make capture $HOSTARG PROFILE="$2" SECONDS=15 WORKLOAD="$WORKLOAD"
  local bundle
  bundle=$(printed "$1" "bundle:\K.*?(?=/?(['\"]|$|TASK|PLAY))")
  if ! .venv/bin/python -m serving.evidence.rank_trace --require-spans "${bundle%/}/ranks" >"$log/$1.ranks.txt" \
      2>"$log/$1.ranks.err"; then
    cat "$log/$1.ranks.txt" "$log/$1.ranks.err" >&2
    echo "pp-receive: $1: the rank trace of $2 cannot be read as §8 reads it (above); nothing was measured" >&2
    exit 1
  fi
  cat "$log/$1.ranks.txt"
}

# 1. What the rank trace shows before the change.
if [ "$mode" = before ]; then
  deploy deploy-a "$A"
  trace trace-before "$A"
  echo "pp-receive: write the prediction from the figures above, then: docs/experiments/pp-receive.sh run PREDICT='...'"
  exit 0
fi

# 2. The two predictions, written before any compared run.
step hypothesis-c1 make hypothesis HYPOTHESIS="$HYPOTHESIS" PREDICT="$PREDICT_C1"
step hypothesis-c4 make hypothesis HYPOTHESIS="$HYPOTHESIS" PREDICT="$PREDICT_C4"
hyp_c1=$(printed hypothesis-c1 'runs/hypotheses/\K[0-9TZ-]+(?=\.json)')
hyp_c4=$(printed hypothesis-c4 'runs/hypotheses/\K[0-9TZ-]+(?=\.json)')

# 3. The instrument first: A and B captured with the trace on; each stage's spans on the runner in force, or stop.
deploy deploy-a-trace "$A"
trace trace-a "$A"
deploy deploy-b-trace "$B"
trace trace-b "$B"

# 4. Outputs: B against A beside A against its own restart.
step validate make validate $HOSTARG A="$A" B="$B"

# 5. The measurement without the instrument: the profiles' copies with the trace off, A B B A (then C D D C)
# ROUNDS times, each bench from its own deploy.
untraced=$(.venv/bin/python -m serving.config.untraced "$A" "$B" $([ "$C" = none ] || echo "$C" "$D") --out "$log/profiles")
mapfile -t copies <<<"$untraced"
declare -A profile=([A]=${copies[0]} [B]=${copies[1]} [C]=${copies[2]:-none} [D]=${copies[3]:-none})
declare -A runs n
order=""
for _ in $(seq "$ROUNDS"); do
  order+=" A B B A"
  [ "$C" = none ] || order+=" C D D C"
done
for p in $order; do
  n[$p]=$((${n[$p]:-0} + 1))
  deploy "deploy-$p${n[$p]}" "${profile[$p]}"
  dir=$(bench "bench-$p${n[$p]}" "${profile[$p]}")
  runs[$p]+="${runs[$p]:+,}$dir"
done
# PREDICT= on the command line: the Makefile reads PREDICT from the environment, and a prediction given to
# compare itself is one written after the runs (and a 2x2 takes none).
for at in c1 c4; do
  hyp=hyp_$at
  step "compare-ab-$at" make compare A="${runs[A]}" B="${runs[B]}" C= D= VARIABLE=REFDEPLOY_PP_DEFER_RECV \
    DESIGN=restarts HYPOTHESIS="${!hyp}" PREDICT=
done
if [ "$C" = none ]; then
  echo "pp-receive: the 2x2 is skipped: C=none D=none (no second change on this engine)" | tee "$log/compare-2x2.log"
else
  step compare-2x2 make compare A="${runs[A]}" B="${runs[B]}" C="${runs[C]}" D="${runs[D]}" \
    VARIABLE="REFDEPLOY_PP_DEFER_RECV,$SECOND" HYPOTHESIS= PREDICT=
fi
cat "$log/compare-ab-c1.log" "$log/compare-2x2.log" | grep -v '^make'
grep -A8 '^hypothesis:' "$log/compare-ab-c4.log" || true

# 6. What it found, small enough to commit: the predictions, validate, the compares, the traces, and what ran.
keep=${KEEP:-docs/experiments/pp-receive/$(date -u +%F)${HOST:+-$HOST}}
mkdir -p "$keep"
for at in c1 c4; do
  cp "runs/hypotheses/$(printed "hypothesis-$at" 'runs/hypotheses/\K[0-9TZ-]+\.json')" "$keep/hypothesis-$at.json"
  cp "$(printed "compare-ab-$at" 'written:\K.*?compare\.txt')" "$keep/compare-ab-$at.txt"
done
[ "$C" = none ] || cp "$(printed compare-2x2 'written:\K.*?compare\.txt')" "$keep/compare-2x2.txt"
cp "$(printed validate 'written:\K.*?validate\.txt')" "$keep/validate.txt"
cp "$log/trace-a.ranks.txt" "$keep/trace-a.txt"
cp "$log/trace-b.ranks.txt" "$keep/trace-b.txt"
{
  echo "pp-receive.sh run, $(date -u +%FT%TZ), from $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (uncommitted changes)')"
  echo "host: ${HOST:-this machine}; workload: $WORKLOAD; rounds: $ROUNDS; order:$order"
  echo "profiles (traced; the benches ran their untraced copies): A=$A B=$B C=$C D=$D"
  echo "predictions: $PREDICT_C1 | $PREDICT_C4"
  echo "benches: A=${runs[A]} B=${runs[B]} C=${runs[C]:-none} D=${runs[D]:-none}"
  echo "every command's output: $log/"
} >"$keep/ran.txt"
echo "pp-receive: done; what it found is in $keep/ (commit it beside the page); the logs in $log/"
