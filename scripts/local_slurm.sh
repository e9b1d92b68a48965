#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, from Debian's packages, for testing the
# workflow's Slurm profile (tests/test_slurm.py, workflows/profiles/slurm-local):
#
#   sudo bash scripts/local_slurm.sh start    # install if missing, configure, start
#   bash scripts/local_slurm.sh status        # exit 0 only when the node takes jobs
#   eval "$(bash scripts/local_slurm.sh env)" # SLURM_CONF for sbatch/sinfo in this shell
#   sudo bash scripts/local_slurm.sh stop     # cancel its jobs, stop what `start` started
#
# It starts munged, slurmctld and slurmd directly (no systemd: containers and CI VMs often
# run without it), each with its config, key, socket, pid file, spool and log under one
# state directory, $EQUIBENCH_SLURM_DIR (default /var/lib/equibench-slurm), so it neither
# reads nor changes a system munge or Slurm. Its own munge socket lets a system munged run
# beside it. Clients find the config through /etc/slurm/slurm.conf, a link to the state
# directory's made when that path is free, or else through SLURM_CONF (`env`).
# `start` twice is fine: running daemons are kept. Logs: $EQUIBENCH_SLURM_DIR/log/.
set -euo pipefail

STATE=${EQUIBENCH_SLURM_DIR:-/var/lib/equibench-slurm}
CONF_DIR=$STATE/etc
CONF=$CONF_DIR/slurm.conf
LOG_DIR=$STATE/log
MUNGE_DIR=$STATE/munge
MUNGE_SOCKET=$MUNGE_DIR/munge.socket
MUNGE_KEY=$MUNGE_DIR/munge.key
# Written into the state directory by `start`: `stop` refuses a directory without it, so a
# mistyped EQUIBENCH_SLURM_DIR never makes it signal processes named by someone else's files.
MARKER=$STATE/.equibench-slurm
SYSTEM_CONF=/etc/slurm/slurm.conf
PARTITION=equibench
PACKAGES=(slurmctld slurmd slurm-client munge)

die() { echo "local_slurm: error: $*" >&2; exit 1; }
say() { echo "local_slurm: $*"; }

usage() {
    echo "usage: bash scripts/local_slurm.sh start|stop|status|env" >&2
    echo "  state directory: $STATE (EQUIBENCH_SLURM_DIR)" >&2
    exit 2
}

need_root() {
    # slurmd must be root to start jobs as their users; munged and the daemons write
    # root-owned state.
    [ "$(id -u)" -eq 0 ] || die "'$1' needs root (run it with sudo)"
}

# The pid in a daemon's pid file when that process is alive and is that daemon (a stale
# file can name a pid reused by another program); nothing otherwise.
running_pid() {
    local name=$1 pidfile=$STATE/$1.pid pid
    [ -s "$pidfile" ] || return 1
    pid=$(tr -dc '0-9' < "$pidfile")
    [ -n "$pid" ] || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 1
    echo "$pid"
}

# Every client command goes through here, so none reads another cluster's config.
slurm() { SLURM_CONF=$CONF "$@"; }

show_log() {
    local log=$LOG_DIR/$1.log
    if [ -f "$log" ]; then
        echo "--- last lines of $log:" >&2
        tail -n 15 "$log" >&2
    fi
}

install_packages() {
    local missing=() pkg
    for pkg in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get"
    say "installing ${missing[*]}"
    # Quiet, and no recommends: the daemons, the client commands and munge are enough.
    export DEBIAN_FRONTEND=noninteractive
    if apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$STATE/apt.log" 2>&1; then
        return 0
    fi
    # The package lists may be missing (fresh container) or stale: update once, retry.
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
        >>"$STATE/apt.log" 2>&1; then
        tail -n 20 "$STATE/apt.log" >&2
        die "apt-get install ${missing[*]} failed (log: $STATE/apt.log)"
    fi
}

write_config() {
    local hw node cpus boards sockets cores threads memory host
    # This node's real hardware, as slurmd itself will report it on registering: a
    # configuration that claims more than that puts the node in the INVALID state.
    hw=$(slurmd -C | head -n 1) || die "'slurmd -C' failed"
    field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$hw"; }
    node=$(field NodeName); cpus=$(field CPUs); boards=$(field Boards)
    sockets=$(field SocketsPerBoard); cores=$(field CoresPerSocket)
    threads=$(field ThreadsPerCore); memory=$(field RealMemory)
    if [ -z "$node" ] || [ -z "$cpus" ] || [ -z "$memory" ]; then
        die "could not read the node's hardware from 'slurmd -C': $hw"
    fi
    host=$(hostname -s)
    cat > "$CONF.new" <<EOF
# Written by scripts/local_slurm.sh on $(date -u +%FT%TZ); rewritten by every start
# while slurmctld is stopped. A one-node cluster on $host.
ClusterName=equibench
# 127.0.0.1: nothing else needs to resolve this host's name.
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# Our own munged (its socket here) rather than a system one that may not run.
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups: VMs and containers without systemd often have no writable cgroup tree.
# Processes are tracked through /proc, tasks are not bound to cores, and a job's memory
# is not enforced (its request is still checked against RealMemory). Nothing stores
# usage (no accounting database), so none is gathered.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# No slurmdbd: snakemake-executor-plugin-slurm polls squeue (the profile sets
# slurm-status-command: squeue), which needs finished jobs kept listed for a while:
# MinJobAge must exceed three of its first status-check intervals.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=300
SchedulerType=sched/backfill
# Cores are the consumable: a job asking for every core waits for the others, as the
# local profile serializes CPU benchmark jobs.
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
KillWait=5
InactiveLimit=0
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus Boards=${boards:-1} SocketsPerBoard=${sockets:-1} CoresPerSocket=${cores:-$cpus} ThreadsPerCore=${threads:-1} RealMemory=$memory State=UNKNOWN
PartitionName=$PARTITION Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
    mv "$CONF.new" "$CONF"
    # Read only if a cgroup plugin is named above; written so nothing falls back to
    # /etc/slurm/cgroup.conf and mounts cgroups on its own.
    cat > "$CONF_DIR/cgroup.conf" <<EOF
# Written by scripts/local_slurm.sh: cgroups are not used by this cluster.
CgroupAutomount=no
ConstrainCores=no
ConstrainRAMSpace=no
EOF
}

link_system_conf() {
    # Plain `sinfo` and `sbatch` read /etc/slurm/slurm.conf; link it to ours when it is free
    # or already ours. A real config there is left alone: use SLURM_CONF (`env`).
    if [ -L "$SYSTEM_CONF" ] && [ "$(readlink "$SYSTEM_CONF")" = "$CONF" ]; then return 0; fi
    if [ -e "$SYSTEM_CONF" ] || [ -L "$SYSTEM_CONF" ]; then
        say "note: $SYSTEM_CONF exists and is not ours; clients need: export SLURM_CONF=$CONF"
        return 0
    fi
    mkdir -p "$(dirname "$SYSTEM_CONF")"
    ln -s "$CONF" "$SYSTEM_CONF"
}

start_munge() {
    if running_pid munged >/dev/null; then return 0; fi
    # The directory of munge's socket must be searchable by every user; the key must be
    # readable by its owner only, or munged refuses to start.
    chmod 0755 "$MUNGE_DIR"
    if [ ! -s "$MUNGE_KEY" ]; then
        mungekey --create --keyfile="$MUNGE_KEY" || die "mungekey could not create $MUNGE_KEY"
    fi
    chmod 0600 "$MUNGE_KEY"
    say "starting munged"
    munged --socket="$MUNGE_SOCKET" --key-file="$MUNGE_KEY" --pid-file="$STATE/munged.pid" \
        --log-file="$LOG_DIR/munged.log" --seed-file="$MUNGE_DIR/munged.seed" \
        || { show_log munged; die "munged did not start"; }
    munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET" >/dev/null \
        || { show_log munged; die "munged runs but a credential does not round-trip"; }
}

start_daemon() {
    local name=$1
    if running_pid "$name" >/dev/null; then return 0; fi
    say "starting $name"
    # Both fork into the background once they have read the config; a bad config makes
    # them exit non-zero here, with the reason in their log.
    SLURM_CONF=$CONF "$name" -f "$CONF" || { show_log "$name"; die "$name did not start"; }
}

wait_for() {
    # wait_for SECONDS WHAT DAEMON COMMAND...: poll COMMAND until it succeeds; give up at
    # once when DAEMON has exited (a bad config or a busy port: its log says which).
    local seconds=$1 what=$2 daemon=$3 i
    shift 3
    for ((i = 0; i < seconds * 4; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        # The pid file appears a moment after the daemon forks: judge after a second.
        if [ -n "$daemon" ] && [ "$i" -ge 4 ] && ! running_pid "$daemon" >/dev/null; then
            echo "local_slurm: error: $daemon exited while waiting for $what" >&2
            return 1
        fi
        sleep 0.25
    done
    echo "local_slurm: error: timed out after ${seconds}s waiting for $what" >&2
    return 1
}

node_takes_jobs() {
    # idle, mixed or allocated, with no flag (down*, drain, not_responding...).
    local state
    state=$(slurm sinfo -h -N -p "$PARTITION" -o %T 2>/dev/null | head -n 1)
    case $state in idle | mixed | allocated | completing) return 0 ;; *) return 1 ;; esac
}

start_failed() {
    # Nothing half-up: a cluster without its controller or node only confuses the next
    # `status`. Stops whatever runs from this state directory.
    local rc=$?
    [ "$rc" -eq 0 ] && return 0
    echo "local_slurm: start failed; stopping what runs from $STATE" >&2
    stop_daemons >&2 || true
    exit "$rc"
}

cmd_start() {
    need_root start
    mkdir -p "$STATE"
    if [ ! -e "$MARKER" ] && [ -n "$(ls -A "$STATE")" ]; then
        die "$STATE is not empty and was not made by this script; choose another EQUIBENCH_SLURM_DIR"
    fi
    touch "$MARKER"
    trap start_failed EXIT
    mkdir -p "$CONF_DIR" "$LOG_DIR" "$MUNGE_DIR" "$STATE/slurmctld" "$STATE/slurmd"
    install_packages
    # Rewritten only while slurmctld is down: a running cluster keeps the config it read.
    if ! running_pid slurmctld >/dev/null; then write_config; fi
    link_system_conf
    start_munge
    start_daemon slurmctld
    wait_for 30 "slurmctld to answer (scontrol ping)" slurmctld slurm scontrol ping \
        || { show_log slurmctld; exit 1; }
    start_daemon slurmd
    if ! wait_for 30 "the node to take jobs" slurmd node_takes_jobs; then
        # A node left DOWN or DRAINED by an earlier, unclean stop: let it back in once.
        slurm scontrol update nodename="$(slurm sinfo -h -N -o %N | head -n 1)" state=resume \
            2>/dev/null || true
        wait_for 15 "the node to take jobs" slurmd node_takes_jobs \
            || { slurm sinfo -N -l >&2 || true; show_log slurmd; show_log slurmctld; exit 1; }
    fi
    trap - EXIT
    cmd_status
}

stop_daemon() {
    local name=$1 pid i
    pid=$(running_pid "$name") || return 0
    say "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 60; i++)); do
        [ -d "/proc/$pid" ] || { rm -f "$STATE/$name.pid"; return 0; }
        sleep 0.25
    done
    say "$name did not stop in 15s: killing it"
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$STATE/$name.pid"
}

stop_daemons() {
    # Jobs first: a job step left behind by a stopped slurmd would run on unaccounted.
    if running_pid slurmctld >/dev/null && slurm scontrol ping >/dev/null 2>&1; then
        slurm scancel --partition="$PARTITION" 2>/dev/null || true
        wait_for 20 "the jobs to end" "" \
            bash -c "[ -z \"\$(SLURM_CONF='$CONF' squeue -h -t running,completing)\" ]" || true
    fi
    stop_daemon slurmd
    stop_daemon slurmctld
    if running_pid munged >/dev/null; then
        say "stopping munged"
        munged --stop --socket="$MUNGE_SOCKET" >/dev/null 2>&1 || stop_daemon munged
    fi
}

cmd_stop() {
    need_root stop
    if [ ! -d "$STATE" ]; then say "nothing to stop ($STATE does not exist)"; return 0; fi
    [ -e "$MARKER" ] || die "$STATE was not made by this script; not touching it"
    stop_daemons
    if [ -L "$SYSTEM_CONF" ] && [ "$(readlink "$SYSTEM_CONF")" = "$CONF" ]; then
        rm -f "$SYSTEM_CONF"
    fi
    say "stopped (state and logs kept in $STATE)"
}

cmd_status() {
    local ok=0 name pid
    for name in munged slurmctld slurmd; do
        if pid=$(running_pid "$name"); then
            say "$name running (pid $pid)"
        else
            say "$name not running"; ok=1
        fi
    done
    if [ "$ok" -eq 0 ]; then
        if ! slurm scontrol ping >/dev/null 2>&1; then
            say "slurmctld does not answer (see $LOG_DIR/slurmctld.log)"; ok=1
        else
            slurm sinfo -N -o "%N %P %T %c %m" || ok=1
            if ! node_takes_jobs; then say "the node does not take jobs"; ok=1; fi
            say "version: $(slurm sinfo -V)"
        fi
    fi
    if [ "$ok" -eq 0 ]; then
        say "running; config $CONF, logs in $LOG_DIR"
    else
        say "not running (start it: sudo bash scripts/local_slurm.sh start)"
    fi
    return "$ok"
}

cmd_env() {
    # For clients when /etc/slurm/slurm.conf is someone else's: eval "$(... env)".
    echo "export SLURM_CONF=$CONF"
}

case ${1:-} in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) cmd_env ;;
    *) usage ;;
esac
