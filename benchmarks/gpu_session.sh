#!/usr/bin/env bash
# One short GPU session: the issue-5 benchmark (610m, seq 2048, bf16, against transformers), the largest
# micro-batch per side, a torch.compile run, and the GPU kernel tests. Each part has its own time limit and
# writes its log and JSON under $OUT; the most important parts run first.
#   OUT=/tmp/gpu bash benchmarks/gpu_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
OUT="${OUT:-$PWD/gpu_session_out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
"$PY" -c "import torch, transformers, triton; print('torch', torch.__version__, '| transformers', transformers.__version__, '| triton', triton.__version__)" | tee -a "$OUT/device.txt"

bench() {  # name, time limit, arguments...
  local name=$1 limit=$2; shift 2
  echo "== $name =="
  timeout "$limit" "$PY" benchmarks/train_step.py --json "$OUT/$name.json" "$@" 2>&1 | tee "$OUT/$name.log"
}
bench train_610m_mlm 100 --preset 610m --objective mlm --compare hf --micro-batch-size 8 --steps 4 --warmup 2
bench train_610m_clm 80 --preset 610m --objective clm --compare hf --micro-batch-size 8 --steps 4 --warmup 2
bench max_batch_610m_mlm 150 --preset 610m --objective mlm --compare hf --micro-batch-size 8 --steps 1 --warmup 1 --max-batch
bench train_610m_mlm_compile 120 --preset 610m --objective mlm --compare none --micro-batch-size 8 --steps 4 --warmup 3 --compile
echo "== kernel tests on the GPU =="
timeout 120 "$PY" -m pytest -q -x -p no:cacheprovider tests/unit/kernels 2>&1 | tail -5 | tee "$OUT/kernel_tests.log"
echo "gpu_session: done (logs in $OUT)"
