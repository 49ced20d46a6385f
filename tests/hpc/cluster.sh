#!/bin/bash
# The HPC stage's SLURM cluster, in one folder: munged, slurmctld and one slurmd per node, started by this script
# with their own sockets, ports and state, and stopped by PID. Sourced by run_stage.sh:
#
#   source tests/hpc/cluster.sh; cluster_up DIR; ...; cluster_down
#
# Nodes and partitions:
#   cpu (default)  two nodes without GPUs, NODE1 and NODE2 below, each a host of its own on this machine: a network
#                  namespace (its interface eth0 on a bridge this script creates, an address of HPC_SUBNET that only
#                  these namespaces and the bridge use) and a UTS namespace (its hostname), with its own slurmd;
#                  $DIR/<node>.hosts, bind-mounted on the node's /etc/hosts, names the nodes and the controller. Open MPI reaches
#                  the other node through $DIR/nsrsh (its plm_rsh_agent), which enters that node's namespaces.
#   gpu            this machine itself with 8 fake `gpu` GRES (each GRES file a link to /dev/null), so GPU-shaped
#                  scripts (--gpus-per-node=8) submit.
# A node silent for 30 s is down (SlurmdTimeout; clusters often wait 300 s): a job on a node that died ends and is
# requeued within a minute, which the node-failure test waits for. Every node has this machine's CPUs (`nproc --all`: `nproc` follows OMP_NUM_THREADS). Where namespaces cannot be
# made (no root, no `ip netns`), the cpu partition is one node on this machine (a second slurmd, `slurmd -N`), the
# stage prints a line saying so, and the two-node tests skip. No accounting, proctrack/linuxproc and task/none (no
# cgroups needed in a container).

NODE1=mmnode1
NODE2=mmnode2

# A /24 of 10.213.0.0/16 that no interface of this machine holds yet (a second stage on the machine picks another).
_free_subnet() {
    local i net
    for i in $(seq 40); do
        net=10.213.$(( RANDOM % 250 + 1 ))
        if ! ip -o -4 addr show 2>/dev/null | grep -q " ${net//./\\.}\."; then
            echo "$net"
            return 0
        fi
    done
    return 1
}

# Run a command on a node: inside its network, UTS and mount namespaces (the mount one holds its /etc/hosts).
node_exec() {
    local node=$1
    shift
    nsenter -t "$(cat "$HPC_CLUSTER_DIR/$node.anchor")" -m -u -n -- "$@"
}

# The two nodes' namespaces, bridge and addresses; 1 (and nothing left behind) where they cannot be made.
_namespaces_up() {
    local dir=$1 host=$2 tag net node i ns
    command -v ip >/dev/null && command -v nsenter >/dev/null && command -v unshare >/dev/null || return 1
    tag=$(printf '%04x' $(( RANDOM )))
    net=$(_free_subnet) || return 1
    echo "$tag" > "$dir/netns.tag"
    HPC_BRIDGE=mmbr$tag
    ip link add "$HPC_BRIDGE" type bridge 2>/dev/null || return 1
    ip addr add "$net.1/24" dev "$HPC_BRIDGE" && ip link set "$HPC_BRIDGE" up || return 1
    HPC_SUBNET=$net
    i=0
    for node in "$NODE1" "$NODE2"; do
        i=$(( i + 1 ))
        ns=mm$tag-$node
        ip netns add "$ns" || return 1
        echo "$ns" >> "$dir/netns.list"
        ip link add "mmv$tag$i" type veth peer name "mmp$tag$i" || return 1
        ip link set "mmp$tag$i" netns "$ns" && ip link set "mmv$tag$i" master "$HPC_BRIDGE" up || return 1
        ip netns exec "$ns" ip link set "mmp$tag$i" name eth0 || return 1
        ip netns exec "$ns" ip addr add "$net.$(( 10 + i ))/24" dev eth0 || return 1
        ip netns exec "$ns" ip link set eth0 up && ip netns exec "$ns" ip link set lo up || return 1
        echo "mmv$tag$i" > "$dir/$node.veth"
        echo "$ns" > "$dir/$node.netns"
        echo "$net.$(( 10 + i ))" > "$dir/$node.addr"
        printf '127.0.0.1 localhost\n%s %s\n%s %s\n%s %s\n' "$net.1" "$host" "$net.11" "$NODE1" \
            "$net.12" "$NODE2" > "$dir/$node.hosts"
        # The anchor: a process that holds the node's namespaces (network; UTS: its hostname; mount: its /etc/hosts,
        # a private bind mount) while the node's daemons come and go (a test kills every other process of the node
        # to make it die). Not `ip netns exec`, which mounts a /sys without the cgroup tree slurmd reads.
        nsenter --net="/run/netns/$ns" unshare --mount --propagation private --uts \
            sh -c 'mount --bind "$2" /etc/hosts && hostname "$1" && exec sleep infinity' sh "$node" "$dir/$node.hosts" \
            </dev/null >/dev/null 2>&1 &
        echo $! > "$dir/$node.anchor"
        disown "$!"  # killed by cluster_down: no "Killed" line from the shell
    done
    for node in "$NODE1" "$NODE2"; do
        for _ in $(seq 50); do
            [[ "$(node_exec "$node" hostname 2>/dev/null)" == "$node" ]] && break
            sleep 0.1
        done
        [[ "$(node_exec "$node" hostname 2>/dev/null)" == "$node" ]] || return 1
    done
    # Open MPI's launcher agent: `nsrsh NODE COMMAND...` in place of `ssh NODE COMMAND...`.
    cat > "$dir/nsrsh" <<AGENT
#!/bin/bash
# plm_rsh_agent of the HPC stage's cluster: run a command on a node (its namespaces), as ssh would.
node=\$1
shift
exec nsenter -t "\$(cat "$dir/\$node.anchor")" -m -u -n -- /bin/sh -c "\$*"
AGENT
    chmod 755 "$dir/nsrsh"
    printf '%s slots=2\n%s slots=2\n' "$NODE1" "$NODE2" > "$dir/hostfile"
    return 0
}

_namespaces_down() {
    local dir=$1 ns pid
    [[ -f "$dir/netns.list" ]] || return 0
    while read -r ns; do
        [[ -n "$ns" ]] || continue
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
        ip netns del "$ns" 2>/dev/null || true
    done < "$dir/netns.list"
    ip link del "mmbr$(cat "$dir/netns.tag")" 2>/dev/null || true
    rm -f "$dir/netns.list"
}

# Start (or restart, after a test killed it) the slurmd of a node.
node_slurmd() {
    local node=$1
    if [[ -f "$HPC_CLUSTER_DIR/$node.anchor" ]]; then
        node_exec "$node" slurmd -f "$SLURM_CONF" -N "$node"
    else
        slurmd -f "$SLURM_CONF" -N "$node"
    fi
}

cluster_up() {
    local dir=$1 cpus host
    mkdir -p "$dir"/{state,spool,log,gres} "$dir/spool/$(hostname -s)" "$dir/spool/$NODE1" "$dir/spool/$NODE2"
    chmod 755 "$dir" "$dir"/{state,spool,log}
    cpus=$(nproc --all)
    host=$(hostname -s)
    HPC_CLUSTER_DIR=$dir
    # Ports of this cluster only: a system SLURM, or a second stage on the machine, keeps its own.
    local ctld_port=${HPC_SLURMCTLD_PORT:-$((16817 + RANDOM % 2000))}
    local slurmd_port=$((ctld_port + 1))
    # slurmd wants a character device behind each GRES file: links to /dev/null stand in for GPUs.
    for i in 0 1 2 3 4 5 6 7; do ln -sfn /dev/null "$dir/gres/gpu$i"; done
    local cpu_nodes
    if _namespaces_up "$dir" "$host"; then
        HPC_TWO_NODES=1
        cpu_nodes="NodeName=${NODE1} NodeAddr=$(cat "$dir/$NODE1.addr") CPUs=${cpus} Sockets=1 CoresPerSocket=${cpus} ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN
NodeName=${NODE2} NodeAddr=$(cat "$dir/$NODE2.addr") CPUs=${cpus} Sockets=1 CoresPerSocket=${cpus} ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN
PartitionName=cpu Nodes=${NODE1},${NODE2} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
    else
        _namespaces_down "$dir"
        HPC_TWO_NODES=0
        echo "hpc stage: network and UTS namespaces cannot be made here (needs root, ip netns, nsenter, unshare);" \
             "the cpu partition is one node on this machine and the two-node tests skip"
        cpu_nodes="NodeName=${NODE1} NodeHostname=${host} NodeAddr=127.0.0.1 Port=$((slurmd_port + 1)) CPUs=${cpus} Sockets=1 CoresPerSocket=${cpus} ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN
PartitionName=cpu Nodes=${NODE1} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
    fi
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
SlurmdSpoolDir=${dir}/spool/%n
SlurmctldPidFile=${dir}/slurmctld.pid
SlurmdPidFile=${dir}/slurmd-%n.pid
SlurmctldLogFile=${dir}/log/slurmctld.log
SlurmdLogFile=${dir}/log/slurmd-%n.log
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
SlurmdTimeout=30
SlurmdParameters=config_overrides
NodeName=${host} CPUs=${cpus} Sockets=1 CoresPerSocket=${cpus} ThreadsPerCore=1 Gres=gpu:8 RealMemory=1000 State=UNKNOWN
${cpu_nodes}
PartitionName=gpu Nodes=${host} MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
    echo "NodeName=${host} Name=gpu File=${dir}/gres/gpu[0-7]" > "$dir/gres.conf"
    export SLURM_CONF=$dir/slurm.conf
    # munged refuses a key readable by others and a socket folder it does not own; it runs as root here. Its socket
    # is a file, which the nodes' namespaces reach as well.
    install -m 600 /etc/munge/munge.key "$dir/munge.key"
    munged --force --key-file="$dir/munge.key" --socket="$dir/munge.socket" \
           --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge.seed"
    slurmctld -f "$SLURM_CONF" -i
    slurmd -f "$SLURM_CONF" -N "$host"
    node_slurmd "$NODE1"
    if (( HPC_TWO_NODES )); then
        node_slurmd "$NODE2"
    fi
    # Up when every node accepts work (idle), within a minute.
    local i nodes=$(( HPC_TWO_NODES ? 3 : 2 ))
    for i in $(seq 60); do
        if [[ "$(sinfo -h -N -o '%N %T' 2>/dev/null | sort -u | grep -c ' idle$')" == "$nodes" ]]; then
            return 0
        fi
        sleep 1
    done
    echo "hpc stage: the SLURM nodes did not come up; logs in $dir/log" >&2
    sinfo -N -l >&2 || true
    tail -n 20 "$dir"/log/*.log >&2
    return 1
}

cluster_down() {
    local dir=${HPC_CLUSTER_DIR:-}
    [[ -n "$dir" ]] || return 0
    local file pid
    for file in "$dir"/slurmd-*.pid "$dir/slurmctld.pid" "$dir/munged.pid"; do
        pid=$(cat "$file" 2>/dev/null || true)
        if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
            kill "$pid"
            for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        fi
    done
    _namespaces_down "$dir"
}
