#!/bin/bash
# Launch with an MPI launcher instead of torchrun: every rank is a plain `python pretrain.py`, and megamlm
# reads its rank, world size and local rank from the launcher (Open MPI: OMPI_COMM_WORLD_*, MPICH/Intel
# MPI: PMI_RANK/PMI_SIZE/MPI_LOCALRANKID, MVAPICH: MV2_COMM_WORLD_*). The master address (rank 0's host, where
# the rendezvous listens) is MASTER_ADDR when you set it, else rank 0's host as mpirun places it: the same mpirun
# options with one rank, which prints its host name (wherever rank 0 runs, not the host this script runs on).
# Either is exported to every rank below.
#
#   NP=16 HOSTS=node1:8,node2:8 examples/run_mpirun.sh --model 210m --tp 2 --data-path ... --tokenizer-model ...
#   NP=16 examples/run_mpirun.sh --hostfile hosts --bind-to socket -x NCCL_DEBUG -- --model 210m ...
#
# Options before a `--` go to mpirun (--hostfile, -x VAR, binding, --mca ...), the rest to pretrain.py. As root
# (containers) --allow-run-as-root is added, since Open MPI refuses root otherwise. MASTER_PORT defaults to one
# derived from SLURM_JOB_ID inside a SLURM job, else to a port free on the host this script runs on.
#
# Stop signals: Open MPI's mpirun forwards SIGUSR1 to the ranks but answers SIGTERM and SIGINT by killing them,
# mid-checkpoint if they are saving. mpirun runs here in a session of its own, and this script turns SIGTERM and
# SIGINT into SIGUSR1 for it: the ranks finish their step, save one checkpoint and exit 0, and so does this
# script. (SIGTERM sent to mpirun's own PID still kills the ranks: signal this script, or send SIGUSR1.)
#
# PRINT_CMD=1 prints the command instead of running it (without MASTER_ADDR unless you set it: finding rank 0's
# host launches a rank).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NP=${NP:-2}
MPIRUN_OPTIONS=()
if [[ " $* " == *" -- "* ]]; then
    while [[ "$1" != "--" ]]; do
        MPIRUN_OPTIONS+=("$1")
        shift
    done
    shift
fi
if [[ -z "${MASTER_PORT:-}" ]]; then
    if [[ "${SLURM_JOB_ID:-}" =~ ^[0-9]+$ ]]; then
        MASTER_PORT=$(( 15000 + 10#${SLURM_JOB_ID} % 15000 ))  # as the sbatch scripts: one port per job
    else
        MASTER_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
    fi
fi
PLACEMENT=()  # where mpirun puts the ranks
if [[ -n "${HOSTS:-}" ]]; then
    PLACEMENT+=(--host "${HOSTS}")
fi
if (( EUID == 0 )); then
    PLACEMENT+=(--allow-run-as-root)
fi
PLACEMENT+=("${MPIRUN_OPTIONS[@]}")
if [[ -z "${MASTER_ADDR:-}" && "${PRINT_CMD:-0}" != "1" ]]; then
    if ! MASTER_ADDR=$(mpirun -np 1 "${PLACEMENT[@]}" hostname </dev/null); then
        echo "run_mpirun.sh: mpirun could not start one rank to find rank 0's host (its message above); set" \
             "MASTER_ADDR=<rank 0's host> to skip this" >&2
        exit 1
    fi
    MASTER_ADDR=${MASTER_ADDR%%$'\n'*}
fi
CMD=(mpirun -np "${NP}" "${PLACEMENT[@]}")
if [[ -n "${MASTER_ADDR:-}" ]]; then
    CMD+=(-x "MASTER_ADDR=${MASTER_ADDR}")
fi
CMD+=(-x "MASTER_PORT=${MASTER_PORT}" -x OMP_NUM_THREADS=1 python "${REPO}/pretrain.py" "$@")

if [[ "${PRINT_CMD:-0}" == "1" ]]; then
    printf '%q ' "${CMD[@]}"
    echo
    exit 0
fi
# Its own session: Ctrl-C (SIGINT to the terminal's process group) reaches this script only.
setsid "${CMD[@]}" </dev/null &
pid=$!
trap 'kill -USR1 "${pid}" 2>/dev/null || true' TERM INT USR1
# `wait` returns early when a trapped signal arrives; wait again until mpirun itself has exited.
while true; do
    status=0
    wait "${pid}" || status=$?
    if ! kill -0 "${pid}" 2>/dev/null; then
        break
    fi
done
# The status of a finished job stays known to bash; prefer it over the status of an interrupted `wait`.
last=0
wait "${pid}" 2>/dev/null || last=$?
if (( last != 127 )); then
    status=${last}
fi
exit "${status}"
