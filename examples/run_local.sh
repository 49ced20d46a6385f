#!/bin/bash
# One machine, several processes: `torchrun --standalone` (gloo on CPU, NCCL/RCCL on GPUs).
#
#   NPROC=2 examples/run_local.sh --model tiny --tp 2 --train-iters 50 --global-batch-size 8 --micro-batch-size 2
#   NPROC=4 examples/run_local.sh --model tiny --tp 2 --pp 2 --objective clm_then_mlm --switch 0.25
#
# NPROC defaults to the number of visible GPUs, or 2 on a CPU-only machine. Arguments go to pretrain.py.
# Ctrl-C or SIGTERM (kill PID) makes every rank finish its step, save (with --save) and exit; the script then exits
# 0 (torchrun_forward_signals.sh passes the signal to the ranks instead of torchrun's agent).
# PRINT_CMD=1 prints the command instead of running it.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -z "${NPROC:-}" ]]; then
    NPROC=$(python -c "import torch; print(torch.cuda.device_count() or 2)" 2>/dev/null || echo 2)
fi
CMD=("${REPO}/examples/torchrun_forward_signals.sh" --standalone --nnodes 1 --nproc-per-node "${NPROC}"
     "${REPO}/pretrain.py" "$@")

if [[ "${PRINT_CMD:-0}" == "1" ]]; then
    printf '%q ' "${CMD[@]}"
    echo
    exit 0
fi
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} exec "${CMD[@]}"
