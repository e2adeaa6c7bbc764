#!/usr/bin/env bash
# A real one-node Slurm cluster on loopback, for the tests.
#
#   tests/tools/slurm-cluster.sh up DIR     start munged, slurmctld and slurmd in DIR
#   tests/tools/slurm-cluster.sh down DIR   stop them; no process of DIR is left
#
# DIR is a fresh directory owned by the caller (mktemp -d); everything lives
# under it: munge key and socket, slurm.conf, gres.conf, controller state,
# slurmd spool, logs, pid files, the PMIx/task temporary directory and four
# fake GPU devices (DIR/dev/nvidia0..3, char 1,3 like /dev/null).
#
# `up` picks two free TCP ports at run time (the machine is shared: 6817/6818
# may be taken), a unique cluster name and a random first job id (the PMIx
# and OpenMPI session directories are named after the job id), waits until
# the node is idle, writes DIR/env.sh and prints on stdout the line to eval:
#   export SLURM_CONF=DIR/slurm.conf
# The node has 8 CPUs (whatever the machine has) and 4 GPUs (gres gpu:4),
# MpiDefault=pmix. With PP_SLURM_GPU_NODES=N in the environment the
# cluster also has a partition "gpu" of N cloud nodes of 8 fake GPUs each,
# where nothing runs but `sbatch --test-only -p gpu` plans multi-node jobs. On failure it prints the daemons' logs, stops what it had
# started and exits 1. `down` works on a half-started DIR too.
#
# Exit status: 0 ok, 1 failed, 2 usage, 3 not root, 4 packages missing
# (scripts/install-deps.sh installs them). Tests turn 3 and 4 into SKIP.
#
# `down` stops the daemons by their pid files (DIR/run/*.pid, checked against
# the PP_SLURM_CLUSTER=DIR mark each daemon gets in its environment), then
# ends what they leave: any process with a file under DIR open (slurmstepd
# keeps the slurmd log open; it rewrites its own environ), and job tasks
# (SLURM_CONF=DIR/slurm.conf plus a SLURM_JOB_ID in their environment). So
# keep the caller's own files out of DIR. Zombies (<defunct>) count as gone:
# init does not reap them at once on this machine.
set -u
export PATH="$PATH:/usr/sbin:/sbin"

prog=slurm-cluster
say() { echo "$prog: $*" >&2; }
usage() {
	echo "usage: $0 up|down DIR" >&2
	exit 2
}

# --- processes --------------------------------------------------------------

# alive PID: the process exists and is not a zombie (<defunct> counts as dead)
alive() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[ "${stat%% *}" != Z ]
}

# procvar PID FILE: /proc/PID/FILE with NULs turned into newlines
procvar() { tr '\0' '\n' <"/proc/$1/$2" 2>/dev/null; }

# ours PID: the daemon pid (from a pid file) is still one of ours
ours() {
	procvar "$1" environ | grep -qxF "PP_SLURM_CLUSTER=$dir"
}

# cluster_pids: live processes of the cluster: the daemons (marked), any
# process with a file under DIR open (slurmstepd), job tasks and batch
# scripts (slurmstepd starts them with the submitter's environment: this
# cluster's SLURM_CONF and a SLURM_JOB_ID); never this script or its callers
cluster_pids() {
	local self=" " p=$BASHPID d f
	while [ -n "$p" ] && [ "$p" -gt 1 ]; do
		self+="$p "
		d=$(cat "/proc/$p/stat" 2>/dev/null) || break
		d=${d##*) }
		p=$(cut -d' ' -f2 <<<"$d")
	done
	{
		grep -lzxF "PP_SLURM_CLUSTER=$dir" /proc/[0-9]*/environ 2>/dev/null
		# slurmstepd rewrites its environ (setproctitle) but keeps the
		# slurmd log open
		find /proc/[0-9]*/fd -maxdepth 1 -lname "$dir/*" 2>/dev/null
		for f in $(grep -lzxF "SLURM_CONF=$dir/slurm.conf" /proc/[0-9]*/environ 2>/dev/null); do
			grep -qz '^SLURM_JOB_ID=' "$f" 2>/dev/null && echo "$f"
		done
	} | while IFS=/ read -r _ _ p _; do
		case "$self" in *" $p "*) continue ;; esac
		alive "$p" && echo "$p"
	done | sort -un
}

# wait_gone SECONDS PID...: 0 when all are gone or zombies before the deadline
wait_gone() {
	local end=$((SECONDS * 10 + $1 * 10)) p left
	shift
	while :; do
		left=
		for p in "$@"; do alive "$p" && left+=" $p"; done
		[ -z "$left" ] && return 0
		[ $((SECONDS * 10)) -ge "$end" ] && return 1
		sleep 0.05
	done
}

# --- down ---------------------------------------------------------------------

# comm PID: the process name (slurmstepd, sleep, ...)
comm() { cat "/proc/$1/comm" 2>/dev/null; }

down() {
	local f p ids pids=() rest
	# cancel the jobs first while the controller runs, so that the caller's
	# srun and sbatch clients are told and exit instead of hanging
	p=$(cat "$dir/run/slurmctld.pid" 2>/dev/null)
	if [ -n "$p" ] && alive "$p" && ours "$p" && [ -r "$dir/slurm.conf" ]; then
		ids=$(SLURM_CONF=$dir/slurm.conf timeout 2 squeue -h -o %A 2>/dev/null)
		if [ -n "$ids" ]; then
			SLURM_CONF=$dir/slurm.conf timeout 2 scancel $ids 2>/dev/null
			local end=$((SECONDS + 3))
			while [ $SECONDS -lt $end ] &&
				[ -n "$(SLURM_CONF=$dir/slurm.conf timeout 2 squeue -h -o %A 2>/dev/null)" ]; do
				sleep 0.1
			done
		fi
	fi
	# then the daemons, by their pid files (only when the pid is still ours)
	for f in "$dir"/run/slurmctld.pid "$dir"/run/slurmd.pid "$dir"/run/munged.pid; do
		p=$(cat "$f" 2>/dev/null)
		[ -n "$p" ] && alive "$p" && ours "$p" || continue
		kill -TERM "$p" 2>/dev/null && pids+=("$p")
	done
	# then what outlives slurmd: slurmstepd (which ignores SIGTERM) and tasks
	for p in $(cluster_pids); do
		case " ${pids[*]} " in *" $p "*) continue ;; esac
		if [ "$(comm "$p")" = slurmstepd ]; then
			kill -KILL "$p" 2>/dev/null && pids+=("$p")
		else
			kill -TERM "$p" 2>/dev/null && pids+=("$p")
		fi
	done
	[ ${#pids[@]} -eq 0 ] && return 0
	wait_gone 3 "${pids[@]}" && [ -z "$(cluster_pids)" ] && return 0
	for p in $(cluster_pids); do
		say "process $p ($(comm "$p")) ignored SIGTERM; killing it"
		kill -KILL "$p" 2>/dev/null
	done
	rest=$(cluster_pids)
	[ -z "$rest" ] && return 0
	wait_gone 2 $rest && return 0
	say "processes still running after SIGKILL: $(cluster_pids | tr '\n' ' ')"
	return 1
}

# --- up -----------------------------------------------------------------------

need_packages() {
	local c missing=()
	for c in mungekey munged munge unmunge slurmctld slurmd sinfo srun sbatch squeue scontrol; do
		command -v "$c" >/dev/null 2>&1 || missing+=("$c")
	done
	compgen -G "/usr/lib/*/slurm-wlm/mpi_pmix.so" >/dev/null || missing+=("mpi_pmix.so (slurm-wlm-basic-plugins)")
	[ ${#missing[@]} -eq 0 ] && return 0
	say "missing: ${missing[*]}; run scripts/install-deps.sh as root"
	exit 4
}

# port_in_use PORT: some TCP socket (v4 or v6, any state) has this local port
port_in_use() {
	awk -v h="$(printf '%04X' "$1")" 'FNR > 1 { n = split($2, a, ":"); if (a[n] == h) f = 1 }
		END { exit !f }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# free_ports N: N distinct free ports below the ephemeral range (where
# bind(0) callers and outgoing connections do not land)
free_ports() {
	local n=$1 got=() p tries=0
	while [ ${#got[@]} -lt "$n" ] && [ $tries -lt 1000 ]; do
		tries=$((tries + 1))
		p=$((12000 + (RANDOM * 32768 + RANDOM) % 20000))
		case " ${got[*]} " in *" $p "*) continue ;; esac
		port_in_use "$p" || got+=("$p")
	done
	echo "${got[@]}"
}

# show_logs: the end of each daemon's log (its own output file when the log
# is empty: errors before the log file opens go there)
show_logs() {
	local n f
	for n in mungekey munged slurmctld slurmd; do
		f=$dir/log/$n.log
		[ -s "$f" ] || f=$dir/log/$n.out
		[ -s "$f" ] || continue
		echo "---- $f (last 15 lines) ----" >&2
		tail -n 15 "$f" >&2
	done
}

up_failed() {
	say "$1"
	show_logs
	down
	exit 1
}

# start NAME CMD...: run a daemon in the foreground, in the background of this
# script, marked and with its own output file; record its pid
start() {
	local name=$1
	shift
	PP_SLURM_CLUSTER=$dir "$@" </dev/null >>"$dir/log/$name.out" 2>&1 &
	echo $! >"$dir/run/$name.pid"
}

pid_of() { cat "$dir/run/$1.pid" 2>/dev/null; }

# PP_SLURM_GPU_NODES=N adds N nodes of 8 fake GPUs and 64 CPUs each in a
# partition of their own, "gpu". No slurmd runs for them: they are cloud
# nodes, powered down, which the controller still plans jobs on (a node in
# state UNKNOWN it would not), so `sbatch --test-only -p gpu` judges a
# multi-node GPU script. Nothing can run there.
fake_gpu_nodes() {
	local n=${PP_SLURM_GPU_NODES:-0}
	[ "$n" -gt 0 ] || return 0
	echo "NodeName=gpu[1-$n] NodeAddr=127.0.0.1 CPUs=64 Boards=1 SocketsPerBoard=2 CoresPerSocket=32 ThreadsPerCore=1 RealMemory=1000000 Gres=gpu:8 State=CLOUD"
	echo "SuspendProgram=/bin/true"
	echo "ResumeProgram=/bin/true"
	echo "SuspendTime=600"
	echo "SuspendExcNodes=$(hostname -s)"
	echo "PartitionName=gpu Nodes=gpu[1-$n] Default=NO MaxTime=INFINITE State=UP"
}

write_conf() {
	local host=$1 ctld_port=$2 slurmd_port=$3 name=$4 first_job=$5
	cat >"$dir/slurm.conf" <<EOF
# Generated by tests/tools/slurm-cluster.sh: a one-node cluster on loopback.
ClusterName=$name
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/run/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.daemon.pid
SlurmdPidFile=$dir/run/slurmd.daemon.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
TmpFS=$dir/tmp
PlugStackConfig=$dir/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
ReturnToService=2
SlurmdParameters=config_overrides
FirstJobId=$first_job
MailProg=/bin/true
KillWait=2
InactiveLimit=0
GresTypes=gpu
NodeName=$host NodeAddr=127.0.0.1 NodeHostname=$host CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=8000 Gres=gpu:4 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
$(fake_gpu_nodes)
EOF
	cat >"$dir/gres.conf" <<EOF
AutoDetect=off
NodeName=$host Name=gpu File=$dir/dev/nvidia[0-3]
EOF
	: >"$dir/plugstack.conf"
}

up() {
	[ "$(id -u)" -eq 0 ] || {
		say "needs root (munged, slurmctld and slurmd run as root here)"
		exit 3
	}
	need_packages
	mkdir -p "$dir" || exit 1
	dir=$(cd "$dir" && pwd -P)
	# munged wants execute permission for all on every directory above its
	# socket; DIR itself is made 755 below, its parents are the caller's
	local a=${dir%/*}
	while [ -n "$a" ]; do
		case "$(stat -c %A "$a")" in
		*[xt]) ;;
		*)
			say "$a is not searchable by others (mode $(stat -c %a "$a")): munged refuses a socket below it; use a DIR from mktemp -d under /tmp"
			exit 1
			;;
		esac
		a=${a%/*}
	done
	down >/dev/null 2>&1 # leftovers from an earlier run in the same DIR
	trap 'up_failed "interrupted"' INT TERM HUP

	# fresh state every time: a node drained in an earlier run stays drained
	rm -rf "${dir:?}"/{state,spool,log,run,munge,tmp,dev} "${dir:?}"/{slurm.conf,gres.conf,plugstack.conf,env.sh}
	mkdir -p "$dir"/{state,spool,log,run,tmp,dev,munge/run} || up_failed "cannot make directories in $dir"
	# munged refuses a socket directory that is not 755, or below one that is
	# not searchable by all (mktemp -d makes DIR 700); the key stays 600
	chmod 755 "$dir" "$dir/munge" "$dir/munge/run"
	local i
	for i in 0 1 2 3; do
		mknod "$dir/dev/nvidia$i" c 1 3 || up_failed "mknod $dir/dev/nvidia$i failed"
	done

	local sock=$dir/munge/run/munge.socket
	mungekey --create --keyfile="$dir/munge/munge.key" >>"$dir/log/mungekey.out" 2>&1 ||
		up_failed "mungekey failed"
	start munged munged --foreground --socket="$sock" --key-file="$dir/munge/munge.key" \
		--pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
		--seed-file="$dir/munge/munged.seed"
	local end=$((SECONDS + 5))
	until munge -n -S "$sock" 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1; do
		alive "$(pid_of munged)" || up_failed "munged exited at start"
		[ $SECONDS -lt $end ] || up_failed "munged did not answer on $sock within 5 s"
		sleep 0.05
	done

	local host ports name
	host=$(hostname -s)
	read -ra ports <<<"$(free_ports 2)"
	[ ${#ports[@]} -eq 2 ] || up_failed "no free TCP ports found"
	name=pp$(printf '%04x%04x' $$ $RANDOM | tail -c 8)
	write_conf "$host" "${ports[0]}" "${ports[1]}" "$name" $((1000 + RANDOM * 30))

	start slurmctld slurmctld -D -f "$dir/slurm.conf"
	start slurmd slurmd -D -f "$dir/slurm.conf" -N "$host"
	export SLURM_CONF=$dir/slurm.conf
	local state=
	end=$((SECONDS + 20))
	while :; do
		state=$(sinfo -h -N -n "$host" -o %t 2>/dev/null)
		[ "$state" = idle ] && break
		alive "$(pid_of slurmctld)" || up_failed "slurmctld exited at start"
		alive "$(pid_of slurmd)" || up_failed "slurmd exited at start"
		[ $SECONDS -lt $end ] || up_failed "node $host not idle within 20 s (state: ${state:-no answer})"
		sleep 0.1
	done
	trap - INT TERM HUP
	echo "export SLURM_CONF=$dir/slurm.conf" >"$dir/env.sh"
	cat "$dir/env.sh"
}

main() {
	[ $# -eq 2 ] || usage
	dir=$2
	case "$1" in
	up) up ;;
	down)
		[ -d "$dir" ] || return 0
		dir=$(cd "$dir" && pwd -P)
		down
		;;
	*) usage ;;
	esac
}

# last and on one line: bash has parsed every function before main runs and
# reads nothing after it, so rewriting this file while a cluster is coming up
# (the working tree is shared) cannot derail that run
main "$@"; exit $?
