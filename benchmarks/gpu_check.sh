#!/usr/bin/env bash
# Kernel and attention tests compiled on a CUDA/ROCm GPU (no interpreter), then the kernel benchmark.
# Self-contained: run from anywhere, no install needed. Finishes in well under 8 minutes on one
# H100/H200-class GPU. Results: $OUT (default ./gpu_check_out): test log, benchmark log and JSON.
#   bash benchmarks/gpu_check.sh            OUT=/tmp/x bash benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
OUT="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"

"$PY" - <<'PY' || { echo "gpu_check: no CUDA/ROCm device visible to torch; run this on a GPU machine" >&2; exit 2; }
import torch, sys
assert torch.cuda.is_available()
print("gpu:", torch.cuda.get_device_name(), "| torch", torch.__version__, "| python", sys.version.split()[0])
from megamlm.extras import detect_optional_extras
print("optional extras:", detect_optional_extras())
PY

status=0
echo "== kernel + attention tests on the GPU =="
timeout 300 "$PY" -m pytest -q -p no:cacheprovider --durations=5 tests/unit/kernels tests/unit/model/test_attention_backends.py \
    2>&1 | tee "$OUT/gpu_tests.log" || status=1

echo "== kernel benchmark =="
timeout 240 "$PY" benchmarks/kernel_speed.py --reps 5 --ce-chunks "${CE_CHUNKS:-1024,4096,8192}" --json "$OUT/kernels_gpu.json" 2>&1 | tee "$OUT/kernels_gpu.log" \
    || status=1

echo "gpu_check: $([ $status = 0 ] && echo PASSED || echo FAILED) (logs in $OUT)"
exit $status
