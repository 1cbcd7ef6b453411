#!/usr/bin/env bash
# One command that measures a GPU with the kit's own steps, each under its own time limit so
# that a slow step never costs the others: train the `gpu` translator on a wall budget,
# evaluate it on the test split (greedy and beam), translate a file, write
# benchmarks/results/gpu.json from the MLflow runs (benchmarks/gpu_runs.py), then stop a
# second training with SIGTERM and rerun it, which must resume and end within its budget.
#
#   benchmarks/gpu_check.sh stage           # here, where TensorFlow is: fills .gpu/ (ignored by git)
#   benchmarks/gpu_check.sh run [OUT]       # on the GPU machine (JAX, no TensorFlow), from the root
#
# `stage` prepares the en-es joint-WordPiece token ids into .gpu/work, copies spa-eng.zip and,
# unless GPU_CHECK_WHEELS=none, downloads the wheels a JAX-only machine lacks into .gpu/wheels
# (../shared/gpu/wheels.sh): about 63 MB, what the device tool carries. `run` writes under OUT
# (default: $OUT, else gpu-check/) as it goes: each step's log, steps.json (status and seconds
# of each), nvidia-smi samples, the MLflow store (gpu-mlflow.db) and gpu.json.
#
# `run` refuses at once (one line, status 2) without the staged folder or without a GPU
# (`nvidia-smi -L`; GPU_CHECK_ALLOW_CPU=1 lets a test run it on a CPU), and ends with status
# 1 when any step failed (the stopped training must end with 130, the others with 0).
#
# Settings (environment): GPU_CHECK_MINUTES (training's wall budget, default 4),
# GPU_CHECK_TOTAL_SECONDS (the whole run's, default 570), GPU_CHECK_TRAIN_ARGS (more train
# flags, e.g. a tiny config to test the script), GPU_CHECK_EVAL_ARGS (default: the whole
# test split, 512 sentences decoded at once),
# GPU_CHECK_PYTHON (the interpreter, default python3), GPU_CHECK_RESULTS (where gpu.json is
# copied, default benchmarks/results/gpu.json), GPU_CHECK_STAGE (default .gpu), SPA_ENG_PATH,
# GPU_CHECK_STOP_AFTER (seconds before the SIGTERM of the second training, default 30; 0
# skips the stop and the resume) and GPU_CHECK_STOP_MINUTES (its budget, default 1.5). The
# defaults are sized from the steps' times on an H200 (benchmarks/results/gpu.json) to end
# in about 530 s: one 10-minute call.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STAGE=${GPU_CHECK_STAGE:-$ROOT/.gpu}
PY=${GPU_CHECK_PYTHON:-python3}

stage() {
  mkdir -p "$STAGE"
  cp -f "${SPA_ENG_PATH:-../shared/data/spa-eng.zip}" "$STAGE/spa-eng.zip"
  NLPKIT_WORK_DIR=$STAGE/work $PY -c "
from workflows import translation
translation.prepare('$STAGE/spa-eng.zip', tokenizations=('joint_wordpiece',), directions=('en-es',))"
  rm -rf "$STAGE/work/downloads" "$STAGE/work/extracted" 2>/dev/null
  if [ "${GPU_CHECK_WHEELS:-}" != none ]; then
    ../shared/gpu/wheels.sh "$STAGE/wheels"
    # MLflow's system metrics of the training (its GPU use, every 2 s): not in wheels.sh
    $PY -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux2014_x86_64 --platform any -d "$STAGE/wheels" \
      psutil==7.2.2 nvidia-ml-py==13.615.71
  fi
  du -sh "$STAGE"
  echo "Now, with the device tool: run(command='benchmarks/gpu_check.sh run', carry=['.gpu'])"
}

# step NAME SECONDS COMMAND...: runs COMMAND under `timeout` (SIGTERM, then SIGKILL 15 s later),
# capped by what is left of the whole run; logs to OUT/NAME.log, records status and seconds.
step() {
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE - $(date +%s)))
  (( limit > left )) && limit=$left
  if (( limit <= 5 )); then
    echo "{\"step\": \"$name\", \"status\": \"skipped: no time left\"}" >> "$OUT/steps.jsonl"
    FAILED="$FAILED $name"
    return 1
  fi
  echo "== $name (at most ${limit} s): $*"
  local started=$(date +%s%N)
  timeout -k 15 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local status=$? ms=$(( ($(date +%s%N) - started) / 1000000 ))
  printf '{"step": "%s", "status": %d, "seconds": %d.%03d, "limit": %d}\n' \
    "$name" "$status" $((ms / 1000)) $((ms % 1000)) "$limit" >> "$OUT/steps.jsonl"
  tail -n 3 "$OUT/$name.log"
  local expected=0
  [ "$name" = stop ] && expected=130
  (( status == expected )) || FAILED="$FAILED $name"
  return $status
}

refuse() { echo "gpu_check.sh run: $*" >&2; exit 2; }

run() {
  [ -d "$STAGE/work" ] && [ -f "$STAGE/spa-eng.zip" ] \
    || refuse "no staged data in $STAGE: run 'benchmarks/gpu_check.sh stage' here first, then carry .gpu"
  [ "${GPU_CHECK_ALLOW_CPU:-}" = 1 ] || nvidia-smi -L > /dev/null 2>&1 \
    || refuse "no GPU here (nvidia-smi -L found none): run it on a GPU machine"
  OUT=${1:-${OUT:-$ROOT/gpu-check}}
  mkdir -p "$OUT"
  FAILED=""
  DEADLINE=$(( $(date +%s) + ${GPU_CHECK_TOTAL_SECONDS:-570} ))
  local minutes=${GPU_CHECK_MINUTES:-4}
  if [ -d "$STAGE/wheels" ]; then  # a JAX-only machine: the kit's pure-Python dependencies
    $PY -m pip install -q --no-index --no-deps --no-compile --target "$STAGE/site" \
      "$STAGE"/wheels/*.whl > "$OUT/wheels.log" 2>&1
    export PYTHONPATH=$STAGE/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}
  fi
  export KERAS_BACKEND=${KERAS_BACKEND:-jax} NLPKIT_WORK_DIR=$STAGE/work
  export MLFLOW_TRACKING_URI=sqlite:///$OUT/gpu-mlflow.db NLPKIT_SPA_ENG_PATH=$STAGE/spa-eng.zip
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 2 \
    > "$OUT/nvidia-smi.csv" 2>/dev/null &
  local sampler=$!
  # shellcheck disable=SC2086  # the extra flags are words
  step train $(( ${minutes%.*} * 60 + 75 )) $PY -m workflows.translation train --preset gpu \
    --max-train-minutes "$minutes" ${GPU_CHECK_TRAIN_ARGS:-}
  kill "$sampler" 2>/dev/null
  # shellcheck disable=SC2086
  step evaluate 200 $PY -m workflows.translation evaluate ${GPU_CHECK_EVAL_ARGS:---batch-size 512}
  printf '%s\n' "I love reading books." "Where is the train station?" \
    "She didn't want to go to school today." > "$OUT/sentences.txt"
  step translate 60 $PY -m workflows.translation translate --file "$OUT/sentences.txt"
  step results 30 $PY benchmarks/gpu_runs.py --any-device --output "$OUT/gpu.json" \
    --nvidia-smi "$OUT/nvidia-smi.csv"
  [ -f "$OUT/gpu.json" ] && cp "$OUT/gpu.json" "${GPU_CHECK_RESULTS:-benchmarks/results/gpu.json}"
  stop_and_resume
  cat "$OUT/steps.jsonl"
  [ -z "$FAILED" ] || { echo "gpu_check.sh: failed:$FAILED" >&2; exit 1; }
}

# A second training (another seed; its budget alone ends it, never its epochs or early
# stopping) gets SIGTERM after GPU_CHECK_STOP_AFTER seconds: `stop` must end with status
# 130 within seconds of the signal (its seconds minus the delay), and `resume`, the same
# command again, must resume, train on and finish on the budget.
stop_and_resume() {
  local after=${GPU_CHECK_STOP_AFTER:-30} minutes=${GPU_CHECK_STOP_MINUTES:-1.5}
  (( after > 0 )) || return 0
  # shellcheck disable=SC2206  # the extra flags are words
  local train=($PY -m workflows.translation train --preset gpu ${GPU_CHECK_TRAIN_ARGS:-}
               --epochs 10000 --set patience=10000 --set seed=2
               --max-train-minutes "$minutes")
  step stop $((after + 30)) timeout --preserve-status -s TERM "$after" "${train[@]}"
  step resume $(( ${minutes%.*} * 60 + 60 )) "${train[@]}"  # the budget's rest, start, export
}

case "${1:-}" in
  stage) stage ;;
  run) shift; run "$@" ;;
  *) sed -n '2,29p' "$0"; exit 2 ;;
esac
