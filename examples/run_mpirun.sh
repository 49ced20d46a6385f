#!/bin/bash
# Launch with an MPI launcher instead of torchrun: every rank is a plain `python pretrain.py`, and megamlm
# reads its rank, world size and local rank from the launcher (Open MPI: OMPI_COMM_WORLD_*, MPICH/Intel
# MPI: PMI_RANK/PMI_SIZE/MPI_LOCALRANKID, MVAPICH: MV2_COMM_WORLD_*). The master address is taken from
# MASTER_ADDR (exported to all ranks below), else rank 0's host name via mpi4py when installed.
#
#   NP=16 HOSTS=node1:8,node2:8 examples/run_mpirun.sh --model 210m --tp 2 --data-path ... --tokenizer-model ...
#
# PRINT_CMD=1 prints the command instead of running it.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NP=${NP:-2}
MASTER_ADDR=${MASTER_ADDR:-$(hostname)}
MASTER_PORT=${MASTER_PORT:-29500}
CMD=(mpirun -np "${NP}")
if [[ -n "${HOSTS:-}" ]]; then
    CMD+=(--host "${HOSTS}")
fi
CMD+=(-x "MASTER_ADDR=${MASTER_ADDR}" -x "MASTER_PORT=${MASTER_PORT}" -x OMP_NUM_THREADS=1
      python "${REPO}/pretrain.py" "$@")

if [[ "${PRINT_CMD:-0}" == "1" ]]; then
    printf '%q ' "${CMD[@]}"
    echo
    exit 0
fi
exec "${CMD[@]}"
