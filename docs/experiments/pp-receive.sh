#!/usr/bin/env bash
# Seed 000 §8's experiment, end to end: the PP receive deferred until first use (patch 0005), found with the
# per-step rank trace (patch 0004) and proven with the method. docs/experiments/pp-receive.md says what each step
# shows and what it showed here.
#
#   docs/experiments/pp-receive.sh before [HOST=<inventory host>] [A=<profile>] [WORKLOAD=<name>]
#       A deployed and captured under the workload: what its rank trace shows, to write the prediction from.
#   docs/experiments/pp-receive.sh run PREDICT='<figure> down >= <n>% at c1' [HYPOTHESIS='...'] [HOST=..]
#                                  [A=<profile>] [B=..] [C=..] [D=..] [SECOND=<C's variable>] [WORKLOAD=<name>]
#                                  [RUNS=<n>]
#       The hypothesis written down, then validate, A/B/B/A and C/D/D/C benches each from its own deploy, the
#       A/B compare against the prediction, the 2x2, and the rank trace of B. C=none D=none: no second change
#       (an engine that cannot carry one, as the stand-in, which runs eager): A/B only, and the 2x2 said skipped.
#
# A: the engine as vLLM orders it; B: A with REFDEPLOY_PP_DEFER_RECV=1; C: A with the second change (here the
# forward compiled); D: both. Defaults: the cpu-tiny-pp2 profiles on this machine. On a 3090 host, copy
# rtx3090-pp3 into four profiles the same way (probes.rank_trace: true in each; the env variable in B and D; the
# second change in C and D) and pass HOST= and their names, with SECOND= the second change's variable.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-}
case "$mode" in before | run) shift ;; *) echo "pp-receive.sh: say 'before' or 'run' first (the header says what each does)" >&2; exit 2 ;; esac
for arg in "$@"; do
  case "$arg" in
    # Shell variables, not exported: make reads A, B, C, D from the environment (make compare's designs), and
    # each make below is given what it takes on its command line.
    HOST=* | A=* | B=* | C=* | D=* | SECOND=* | WORKLOAD=* | RUNS=* | PREDICT=* | HYPOTHESIS=*) declare "${arg?}" ;;
    *) echo "pp-receive.sh: unknown argument '$arg' (give NAME=value: HOST A B C D SECOND WORKLOAD RUNS PREDICT HYPOTHESIS)" >&2; exit 2 ;;
  esac
done
A=${A:-cpu-tiny-pp2} B=${B:-cpu-tiny-pp2-deferred} C=${C:-cpu-tiny-pp2-compiled} D=${D:-cpu-tiny-pp2-compiled-deferred}
SECOND=${SECOND:-enforce_eager}
WORKLOAD=${WORKLOAD:-smoke}
if { [ "$C" = none ] && [ "$D" != none ]; } || { [ "$C" != none ] && [ "$D" = none ]; }; then
  echo "pp-receive.sh: C=$C D=$D: give both profiles of the second change, or C=none D=none for none" >&2; exit 2
fi
HOSTARG=${HOST:+HOST=$HOST}
if [ "$mode" = run ] && [ -z "${PREDICT:-}" ]; then
  echo "pp-receive.sh run: give PREDICT='<figure> down >= <n>% at c1', written from what 'before' showed" >&2; exit 2
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
trace() {  # trace NAME PROFILE: a capture under the workload, then each rank's figures from its steps
  step "$1" make capture $HOSTARG PROFILE="$2" SECONDS=15 WORKLOAD="$WORKLOAD"
  local bundle
  bundle=$(printed "$1" "bundle:\K.*?(?=/?(['\"]|$|TASK|PLAY))")
  .venv/bin/python -m serving.evidence.rank_trace "${bundle%/}/ranks" | tee "$log/$1.ranks.txt"
}

# 1. What the rank trace shows before the change.
if [ "$mode" = before ]; then
  deploy deploy-a "$A"
  trace trace-before "$A"
  echo "pp-receive: write the prediction from the figures above, then: docs/experiments/pp-receive.sh run PREDICT='...'"
  exit 0
fi

# 2. The hypothesis, written before any compared run.
step hypothesis make hypothesis HYPOTHESIS="$HYPOTHESIS" PREDICT="$PREDICT"
hyp=$(printed hypothesis 'runs/hypotheses/\K[0-9TZ]+(?=\.json)')

# 3. Outputs: B against A beside A against its own restart.
step validate make validate $HOSTARG A="$A" B="$B"

# 4. A/B/B/A, each bench from its own deploy; then C and D the same way for the 2x2.
declare -A runs n
order="A B B A C D D C"
[ "$C" = none ] && order="A B B A"
for p in $order; do
  n[$p]=$((${n[$p]:-0} + 1))
  deploy "deploy-$p${n[$p]}" "${!p}"
  dir=$(bench "bench-$p${n[$p]}" "${!p}")
  runs[$p]+="${runs[$p]:+,}$dir"
done
# PREDICT= on the command line: the Makefile reads PREDICT from the environment, and a prediction given to
# compare itself is one written after the runs (and a 2x2 takes none).
step compare-ab make compare A="${runs[A]}" B="${runs[B]}" C= D= VARIABLE=REFDEPLOY_PP_DEFER_RECV DESIGN=restarts \
  HYPOTHESIS="$hyp" PREDICT=
if [ "$C" = none ]; then
  echo "pp-receive: the 2x2 is skipped: C=none D=none (no second change on this engine)" | tee "$log/compare-2x2.log"
else
  step compare-2x2 make compare A="${runs[A]}" B="${runs[B]}" C="${runs[C]}" D="${runs[D]}" \
    VARIABLE="REFDEPLOY_PP_DEFER_RECV,$SECOND" HYPOTHESIS= PREDICT=
fi
cat "$log/compare-ab.log" "$log/compare-2x2.log" | grep -v '^make'

# 5. The rank trace after the change.
deploy deploy-b-trace "$B"
trace trace-after "$B"
echo "pp-receive: done; the runs: A=${runs[A]} B=${runs[B]} C=${runs[C]:-none} D=${runs[D]:-none}; logs in $log/"
