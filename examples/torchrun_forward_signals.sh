#!/bin/bash
# torchrun with its arguments, except that stop signals go to the training processes and not to torchrun's agent:
#
#   examples/torchrun_forward_signals.sh --standalone --nproc-per-node 2 pretrain.py --save ckpt/run ...
#
# torchrun's agent turns SIGINT/SIGTERM into a SignalException: it passes the signal on, waits for the workers and
# exits 1 with a traceback even when every worker saved its checkpoint and exited 0, so requeue logic and schedulers
# read a clean stop as a failure. Here the agent ignores SIGINT, SIGTERM and SIGUSR1 (it still handles SIGHUP and
# SIGQUIT), and this script passes each of them to the workers (torchrun's child processes, each in a session of
# its own), which finish their step, save and exit 0; torchrun then exits 0 and so does this script (with the
# workers' status otherwise). (SLURM may also signal every process of a job step directly: a megamlm worker takes
# a signal arriving within a second of the first as the same request.)
set -uo pipefail

# A shell started in the background by a non-interactive parent (`cmd &` in a script, nohup, many CI runners and
# job wrappers) inherits SIGINT as ignored, and bash cannot trap a signal that was ignored when it started: Ctrl-C
# or `kill -INT` would then never reach the workers and the run would go on to its last step. Start this script
# again once with SIGINT at its default (coreutils' env --default-signal, 8.31 or newer) so the trap below holds.
sigint_ignored() {
    local mask
    mask=$(awk '/^SigIgn:/ {print $2}' "/proc/$$/status" 2>/dev/null)
    [[ -n "${mask}" ]] && (( (16#${mask} >> 1) & 1 ))
}
if [[ -z "${MEGAMLM_SIGINT_RESET:-}" ]] && sigint_ignored; then
    if env --default-signal=INT true 2>/dev/null; then
        MEGAMLM_SIGINT_RESET=1 exec env --default-signal=INT bash "$0" "$@"
    fi
    echo "warning: SIGINT is ignored by this script's parent (a background start?) and this system's env cannot" \
         "reset it (coreutils older than 8.31): stop the run with SIGTERM (kill -TERM $$), not Ctrl-C" >&2
fi

# With --max-restarts N > 0, every restart round gets a fresh rendezvous store for the workers: torch's default
# (since 2.5) shares the agent's store with them across rounds without a per-round prefix, and a restarted worker
# can read a peer's address from the round before and fail to connect (pytorch/pytorch#135712; megamlm's HPC stage
# saw it on two nodes). Set TORCH_DISABLE_SHARE_RDZV_TCP_STORE yourself to choose otherwise.
max_restarts=0
previous=""
for arg in "$@"; do
    case "${previous}" in --max-restarts|--max_restarts) max_restarts=${arg} ;; esac
    case "${arg}" in --max-restarts=*|--max_restarts=*) max_restarts=${arg#*=} ;; esac
    [[ "${arg}" == *.py ]] && break  # the training script's own arguments are not torchrun's
    previous=${arg}
done
if [[ "${max_restarts}" =~ ^[0-9]+$ ]] && (( max_restarts > 0 )); then
    export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=${TORCH_DISABLE_SHARE_RDZV_TCP_STORE:-1}
fi

# The agent's own list (torchrun --signals-to-handle); the signals left out stay ignored, as set below.
export PET_SIGNALS_TO_HANDLE=${PET_SIGNALS_TO_HANDLE:-SIGHUP,SIGQUIT}
trap '' INT TERM USR1    # torchrun inherits "ignored"; megamlm's workers install their own handlers
torchrun "$@" </dev/null &
pid=$!
forward() {
    pkill "-$1" -P "${pid}" || true
}
trap 'forward INT' INT
trap 'forward TERM' TERM
trap 'forward USR1' USR1

# `wait` returns early when a trapped signal arrives; wait again until torchrun itself has exited.
while true; do
    wait "${pid}"
    status=$?
    if ! kill -0 "${pid}" 2>/dev/null; then
        break
    fi
done
wait "${pid}" 2>/dev/null
last=$?
# The status of a finished job stays known to bash; prefer it over a status of an interrupted `wait`.
if (( last != 127 )); then
    status=${last}
fi
exit "${status}"
