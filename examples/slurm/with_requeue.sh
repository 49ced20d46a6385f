#!/bin/bash
# Run a megamlm launch command (`srun torchrun pretrain.py ... --save DIR ...`) and requeue this SLURM job when
# the run stopped before --train-iters *after making progress*: a pre-emption warning signal or
# --exit-duration-in-mins made every rank save and exit. A run that saved nothing new (a crash at start, a
# user error) is not requeued, so it cannot loop; MAX_REQUEUES (default 50) bounds the requeues. See requeue.md.
#
#   examples/slurm/with_requeue.sh srun --kill-on-bad-exit=1 torchrun ... pretrain.py --save /ckpt/run1 ...
set -uo pipefail

save=""
prev=""
for arg in "$@"; do
    [[ "$prev" == "--save" ]] && save=$arg
    [[ "$arg" == --save=* ]] && save=${arg#--save=}
    prev=$arg
done
# A step number read from a file, or 0: its contents are checked to be digits before any arithmetic sees them
# (bash arithmetic evaluates an expression it is given, and runs the commands that expression names).
step_or_zero() { if [[ "$1" =~ ^[0-9]+$ ]]; then echo "$((10#$1))"; else echo 0; fi; }
latest_step() { step_or_zero "$(cat "$save/latest_checkpointed_iteration.txt" 2>/dev/null)"; }

before=$(latest_step)
"$@"
status=$?
after=$(latest_step)
if [[ -z "$save" || -z "${SLURM_JOB_ID:-}" ]]; then
    exit "$status"
fi
# The run's length as the checkpoint recorded it (flags or a --config file alike).
train_iters=$(step_or_zero "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["config"]["training"]["train_iters"])' \
              "$save/$(printf 'iter_%07d' "$after")/config.json" 2>/dev/null)")
# TARGET_STEP (a study's segment job, tools/plan_study.py --emit slurm) ends the job at that step instead.
target=$(step_or_zero "${TARGET_STEP:-$train_iters}")
restarts=$(step_or_zero "${SLURM_RESTART_COUNT:-0}")
max_requeues=$(step_or_zero "${MAX_REQUEUES:-50}")
if (( after > before && after < target && restarts < max_requeues )); then
    echo "megamlm: stopped at step $after of $train_iters with a checkpoint; requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
fi
exit "$status"
