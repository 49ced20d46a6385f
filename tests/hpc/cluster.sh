#!/bin/bash
# A one-node SLURM cluster for the HPC stage, in one folder: munged, slurmctld and slurmd started by this script
# with their own sockets, ports and state, and stopped by PID. Sourced by run_stage.sh:
#
#   source tests/hpc/cluster.sh; cluster_up DIR; ...; cluster_down
#
# The node has this machine's CPUs and 8 fake `gpu` GRES, so GPU-shaped scripts
# (--gpus-per-node=8) submit (each GRES file a link to /dev/null); no accounting, proctrack/linuxproc and task/none (no cgroups needed in a container).

cluster_up() {
    local dir=$1 cpus host
    mkdir -p "$dir"/{state,spool,log,gres}
    chmod 755 "$dir" "$dir"/{state,spool,log}
    cpus=$(nproc)
    host=$(hostname -s)
    # Ports of this cluster only: a system SLURM, or a second stage on the machine, keeps its own.
    local ctld_port=${HPC_SLURMCTLD_PORT:-$((16817 + RANDOM % 2000))}
    local slurmd_port=$((ctld_port + 1))
    # slurmd wants a character device behind each GRES file: links to /dev/null stand in for GPUs.
    for i in 0 1 2 3 4 5 6 7; do ln -sfn /dev/null "$dir/gres/gpu$i"; done
    cat > "$dir/slurm.conf" <<CONF
ClusterName=megamlm-ci
SlurmctldHost=${host}
SlurmctldPort=${ctld_port}
SlurmdPort=${slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=${dir}/munge.socket
CredType=cred/munge
StateSaveLocation=${dir}/state
SlurmdSpoolDir=${dir}/spool
SlurmctldPidFile=${dir}/slurmctld.pid
SlurmdPidFile=${dir}/slurmd.pid
SlurmctldLogFile=${dir}/log/slurmctld.log
SlurmdLogFile=${dir}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
SchedulerParameters=sched_interval=2
MinJobAge=600
KillWait=30
InactiveLimit=0
SlurmdTimeout=300
SlurmdParameters=config_overrides
NodeName=${host} CPUs=${cpus} Sockets=1 CoresPerSocket=${cpus} ThreadsPerCore=1 Gres=gpu:8 RealMemory=1000 State=UNKNOWN
PartitionName=ci Nodes=${host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
    echo "Name=gpu File=${dir}/gres/gpu[0-7]" > "$dir/gres.conf"
    export SLURM_CONF=$dir/slurm.conf
    HPC_CLUSTER_DIR=$dir
    # munged refuses a key readable by others and a socket folder it does not own; it runs as root here.
    install -m 600 /etc/munge/munge.key "$dir/munge.key"
    munged --force --key-file="$dir/munge.key" --socket="$dir/munge.socket" \
           --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge.seed"
    slurmctld -f "$SLURM_CONF" -i
    slurmd -f "$SLURM_CONF"
    # Up when the node accepts work (idle), within a minute.
    local i
    for i in $(seq 60); do
        if sinfo -h -N -o '%T' 2>/dev/null | grep -qx idle; then
            return 0
        fi
        sleep 1
    done
    echo "hpc stage: the SLURM node did not come up; logs in $dir/log" >&2
    sinfo -N -l >&2 || true
    tail -n 20 "$dir"/log/*.log >&2
    return 1
}

cluster_down() {
    local dir=${HPC_CLUSTER_DIR:-}
    [[ -n "$dir" ]] || return 0
    local name pid
    for name in slurmd slurmctld munged; do
        pid=$(cat "$dir/$name.pid" 2>/dev/null || true)
        if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
            kill "$pid"
            for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        fi
    done
}
