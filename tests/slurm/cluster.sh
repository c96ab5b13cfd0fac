#!/usr/bin/env bash
# A real Slurm on one host for the tests: munged and slurmctld on the host, one slurmd per
# network namespace on a bridge, so each node has its own address, its own ports and a
# name that resolves (its own /etc/hosts, bind-mounted in a private mount namespace).
#
#   cluster.sh up DIR [NODE...]    start (nodes default to 9 10 11: names cross a digit)
#   cluster.sh down DIR            stop everything up started, remove what it added
#
# Everything lives in DIR: configuration, munge's key and socket, state, logs, and the
# namespaces (bound to files there). Outside it, only the bridge, the veth pairs and, when
# the FORWARD policy is not ACCEPT, one iptables rule exist while the cluster runs.
# Needs root (namespaces, mounts, links) and Debian's slurmctld, slurmd, slurm-client, munge.
set -euo pipefail

command="${1:?usage: cluster.sh up|down DIR [NODE...]}"
dir="$(realpath -m "${2:?usage: cluster.sh up|down DIR [NODE...]}")"
shift 2

nodes=("$@")
[ "$#" -gt 0 ] || nodes=(9 10 11)
net="${TFBOOT_SLURM_NET:-10.213.47}"
bridge=tfbs-br
ctl="$(hostname -s)"

forward_rule=(FORWARD -i "$bridge" -o "$bridge" -j ACCEPT)

remove_links() {
    for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | grep -E '^tfbs-[0-9]+-h' | cut -d@ -f1); do
        ip link del "$link" 2>/dev/null || true
    done
    ip link del "$bridge" 2>/dev/null || true
}

up() {
    mkdir -p "$dir"/{state,log,munge,ns}
    chmod 700 "$dir/munge"
    head -c 1024 /dev/urandom >"$dir/munge/munge.key"
    chmod 400 "$dir/munge/munge.key"
    munged --force --socket="$dir/munge/socket" --key-file="$dir/munge/munge.key" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
        --seed-file="$dir/munge/seed"

    if ip link show "$bridge" >/dev/null 2>&1; then  # left by a run that was killed
        echo "cluster.sh: removing a stale $bridge and its links" >&2
        remove_links
    fi
    ip link add "$bridge" type bridge
    ip addr add "$net.1/24" dev "$bridge"
    ip link set "$bridge" up
    if command -v iptables >/dev/null && ! iptables -S FORWARD | grep -qx -- '-P FORWARD ACCEPT'; then
        iptables -I "${forward_rule[@]}"
        touch "$dir/forward-rule"
    fi
    hosts="127.0.0.1 localhost\n$net.1 $ctl\n"
    for n in "${nodes[@]}"; do hosts+="$net.$n node$n\n"; done
    for n in "${nodes[@]}"; do
        touch "$dir/ns/node$n"
        unshare --net="$dir/ns/node$n" true
        nsenter --net="$dir/ns/node$n" ip link add "tfbs-$n-c" type veth peer name "tfbs-$n-h" netns $$
        nsenter --net="$dir/ns/node$n" ip addr add "$net.$n/24" dev "tfbs-$n-c"
        nsenter --net="$dir/ns/node$n" ip link set "tfbs-$n-c" up
        nsenter --net="$dir/ns/node$n" ip link set lo up
        ip link set "tfbs-$n-h" master "$bridge" up
        printf "$hosts" >"$dir/hosts-node$n"
    done

    cat >"$dir/slurm.conf" <<CONF
ClusterName=tfboot
SlurmctldHost=$ctl($net.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/socket
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldPort=6847
SlurmdPort=6848
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
CONF
    for n in "${nodes[@]}"; do
        echo "NodeName=node$n NodeAddr=$net.$n NodeHostname=node$n CPUs=2 RealMemory=4000 State=UNKNOWN" >>"$dir/slurm.conf"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES" >>"$dir/slurm.conf"

    export SLURM_CONF="$dir/slurm.conf"
    slurmctld -f "$SLURM_CONF"
    for n in "${nodes[@]}"; do  # nsenter, not `ip netns exec`, which remounts /sys: slurmd dies
        nsenter --net="$dir/ns/node$n" unshare --mount --uts --propagation private sh -c \
            "mount --bind '$dir/hosts-node$n' /etc/hosts && hostname node$n && exec slurmd -f '$SLURM_CONF' -N node$n"
    done
    want="idle ${#nodes[@]}"
    for _ in $(seq 300); do
        [ "$(sinfo -h -o '%T %D' 2>/dev/null)" = "$want" ] && return 0
        sleep 0.1
    done
    echo "cluster.sh: the nodes did not become idle: $(sinfo -h 2>&1)" >&2
    return 1
}

down() {
    for pid in "$dir"/slurmd-*.pid "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
        [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null || true
    done
    for _ in $(seq 50); do
        pgrep -f "slurm(ctld|d) -f $dir/" >/dev/null || break
        sleep 0.1
    done
    pkill -9 -f "slurm(ctld|d) -f $dir/" 2>/dev/null || true
    for ns in "$dir"/ns/node*; do
        [ -e "$ns" ] || continue
        umount "$ns" 2>/dev/null || true
        rm -f "$ns"
    done
    remove_links
    if [ -f "$dir/forward-rule" ]; then
        iptables -D "${forward_rule[@]}" 2>/dev/null || true
        rm -f "$dir/forward-rule"
    fi
}

"$command"
