#!/usr/bin/env bash
# The GPU session of issue 16, most important first, each part under its own time limit and the whole under
# DEADLINE seconds (470: under 8 minutes on one H200, so that 15 minutes of device time allow a rerun):
#   1. 610m MLM eager against transformers (micro-batch 8), with a profiler trace of megamlm's steps
#   2. 610m MLM --compile blocks: micro-batch sweep 8/16/24/32 side by side with transformers, profile at the best
#   3. 610m MLM --compile model against transformers    4. 610m MLM --fp8 --compile blocks (sweep 8/16)
#   5. 1b MLM --compile blocks against transformers      6. 1b MLM --fp8 --compile blocks
#   7. GPU tests: kernels, attention, fp8, compile modes 8. attention backends at 2,048 and 8,192
#   9. 610m CLM --compile blocks against transformers   10. 610m MLM --compile cudagraphs
# Per-block compilation compiles one block's graph for all 26 (seconds); whole-model compilation compiles the
# 26 blocks as one graph (longer: 26 times the code to compile), so it is measured once, at micro-batch 8.
# Each part writes its log and JSON under $OUT; a summary table ends the run (benchmarks/session_summary.py).
#   OUT=/tmp/gpu bash benchmarks/gpu_session.sh
#   SMOKE=1 OUT=/tmp/smoke bash benchmarks/gpu_session.sh   # CPU: every part at tiny size (checks the script)
# --fp8 needs torchao. The GPU machine has no network: install it beside the tree first and carry the folder,
#   pip install --no-deps --target .gpu_deps torchao==0.18.0
set -uo pipefail
cd "$(dirname "$0")/.."
DEPS="$PWD/.gpu_deps"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
[ -d "$DEPS" ] && export PYTHONPATH="$PYTHONPATH:$DEPS"  # after the tree: never shadows installed torch
unset TRITON_INTERPRET
OUT="${OUT:-$PWD/benchmarks/results/gpu_session}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
DEADLINE="${DEADLINE:-470}"
SMOKE="${SMOKE:-0}"

if [ "$SMOKE" = 1 ]; then  # tiny shapes on CPU: the same parts and flags, minutes instead of hours
  P610=tiny; P1B=tiny; MB=2; SWEEP=1,2; SWEEP_FP8=1,2; STEPS="--steps 1 --warmup 1"; DEV="--device cpu"
  MODEL=blocks; GRAPHS=none; SEQS=128,256; TOKENS=512; SCALE=8; export CUDA_VISIBLE_DEVICES=""
  TESTS=(tests/unit/parallel/test_float8.py tests/unit/model/test_attention_probe.py)
else
  P610=610m; P1B=1b; MB=8; SWEEP=8,16,24,32; SWEEP_FP8=8,16; STEPS="--steps 3 --warmup 2"; DEV="--device cuda"
  MODEL=model; GRAPHS=cudagraphs; SEQS=2048,8192; TOKENS=16384; SCALE=1
  TESTS=(tests/unit/kernels tests/unit/model/test_attention_backends.py tests/unit/model/test_attention_probe.py
         tests/unit/parallel/test_float8.py tests/unit/parallel/test_compile.py)
fi

{
  if [ "$SMOKE" = 1 ]; then echo "smoke run on CPU"; else nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; fi
  "$PY" -c "import torch, transformers; from megamlm.extras import detect_optional_extras as d; print('torch', torch.__version__, '| transformers', transformers.__version__, '| extras', d())"
} 2>&1 | tee "$OUT/device.txt"
HAS_TORCHAO=$("$PY" -c "from megamlm.extras import installed; print(int(installed('torchao')))")

part() {  # name, time limit (s, at GPU scale), command...: skipped when the deadline leaves too little time
  local name=$1 limit=$(($2 * SCALE)); shift 2
  local left=$((DEADLINE * SCALE - SECONDS))
  if [ "$left" -lt 20 ]; then echo "== $name: skipped (deadline)" | tee "$OUT/$name.log"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s, ${SECONDS}s elapsed) =="
  timeout "$limit" "$@" 2>&1 | grep -v "^Failed to load .*torchao\|is an Enum subclass" | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 124 ] && echo "== $name: stopped at its time limit (${limit}s); figures so far are in $OUT/$name.json"
  return 0
}
bench() {  # name, limit, train_step.py arguments...
  local name=$1 limit=$2; shift 2
  part "$name" "$limit" "$PY" benchmarks/train_step.py $DEV --json "$OUT/$name.json" "$@"
}
fp8_or_skip() {
  if [ "$HAS_TORCHAO" = 1 ]; then bench "$@"; else echo "== $1: skipped (torchao is not installed)" | tee "$OUT/$1.log"; fi
}

bench train_610m_mlm_eager 60 --preset $P610 --objective mlm --compare hf --micro-batch-size $MB $STEPS \
  --profile "$OUT/profile_eager"
bench sweep_610m_mlm_blocks 110 --preset $P610 --objective mlm --compare hf --compile blocks \
  --micro-batch-sizes $SWEEP $STEPS --profile "$OUT/profile_blocks"
bench train_610m_mlm_model 80 --preset $P610 --objective mlm --compare hf --compile $MODEL --micro-batch-size $MB $STEPS
fp8_or_skip sweep_610m_mlm_fp8 60 --preset $P610 --objective mlm --compare none --compile blocks --fp8 \
  --micro-batch-sizes $SWEEP_FP8 $STEPS
bench train_1b_mlm_blocks 50 --preset $P1B --objective mlm --compare hf --compile blocks --micro-batch-size $MB $STEPS
fp8_or_skip train_1b_mlm_fp8 40 --preset $P1B --objective mlm --compare none --compile blocks --fp8 \
  --micro-batch-size $MB $STEPS
part gpu_tests 75 "$PY" -m pytest -q -p no:cacheprovider -m "not distributed" "${TESTS[@]}"
part attention_backends 30 "$PY" benchmarks/attention.py $DEV --seq-lengths $SEQS --tokens $TOKENS \
  --json "$OUT/attention_backends.json"
bench train_610m_clm_blocks 40 --preset $P610 --objective clm --compare hf --compile blocks --micro-batch-size $MB $STEPS
bench train_610m_mlm_cudagraphs 40 --preset $P610 --objective mlm --compare none --compile $GRAPHS \
  --micro-batch-size $MB $STEPS

"$PY" benchmarks/session_summary.py "$OUT" | tee "$OUT/summary.txt"
echo "gpu_session: done in ${SECONDS}s (logs, traces and JSON in $OUT)"
