#!/usr/bin/env bash
# A real single-host Slurm for tests: munge + slurmctld + slurmd on loopback, everything under
# DIR (the configuration written below is complete: it works on Debian 12 as root without systemd).
#
#   local_cluster.sh start DIR   writes DIR/slurm.conf, starts the daemons, waits until the node
#                                is idle; exit 0 and "SLURM_CONF=DIR/slurm.conf" on stdout, or
#                                exit 3 and the reason on stderr when the daemons cannot start
#                                (partitions: debug, the default, and urgent, whose jobs preempt
#                                debug's: PreemptMode=CANCEL)
#   local_cluster.sh stop DIR    stops slurmd and slurmctld by their pid files (munged stays:
#                                it is the host's, and other clusters may use it)
set -uo pipefail

cmd=${1:?start|stop}
dir=${2:?DIR}

cannot() { echo "local Slurm: $*" >&2; exit 3; }

stop() {
  for d in slurmd slurmctld; do
    if [ -f "$dir/$d.pid" ]; then
      pid=$(cat "$dir/$d.pid")
      kill "$pid" 2>/dev/null
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null
    fi
  done
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$cmd" = start ] || cannot "unknown command $cmd"

for tool in munged munge unmunge slurmctld slurmd sbatch squeue scancel scontrol sinfo srun; do
  command -v "$tool" >/dev/null || cannot "$tool not installed (scripts/install-deps installs slurm-wlm munge)"
done
[ "$(id -u)" = 0 ] || cannot "needs root (slurmd runs tasks as their user; SlurmUser=root)"

# munge: the host's daemon, started once.
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  mkdir -p /etc/munge /run/munge /var/log/munge /var/lib/munge
  [ -f /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
  chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null
  chmod 400 /etc/munge/munge.key
  munged --force 2>"$dir/munged.err" || cannot "munged did not start: $(cat "$dir/munged.err")"
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n | unmunge >/dev/null 2>&1 || cannot "munge does not answer"
fi

# Two free ports in a row.
port=$(python3 - <<'PY'
import socket
for p in range(20000, 60000, 7):
    ok = True
    for q in (p, p + 1):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", q))
        except OSError:
            ok = False
        finally:
            s.close()
    if ok:
        import random
        print(p)
        break
PY
)
[ -n "$port" ] || cannot "no free port"
host=$(hostname -s)
cpus=$(nproc)
mkdir -p "$dir/state" "$dir/spool"
cat >"$dir/slurm.conf" <<CONF
ClusterName=adtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/ctld.log
SlurmdLogFile=$dir/d.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=5
MinJobAge=300
# A job in 'urgent' preempts (cancels) jobs in 'debug': the tests' PREEMPTED.
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF" 2>"$dir/slurmctld.err" || cannot "slurmctld did not start: $(tail -3 "$dir/slurmctld.err" "$dir/ctld.log" 2>/dev/null)"
slurmd -f "$SLURM_CONF" 2>"$dir/slurmd.err" || { stop; cannot "slurmd did not start: $(tail -3 "$dir/slurmd.err" "$dir/d.log" 2>/dev/null)"; }
for _ in $(seq 150); do
  state=$(sinfo -h -o %T 2>/dev/null | head -1)
  [ "$state" = idle ] && { echo "SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.1
done
stop
cannot "the node did not become idle within 15 s (sinfo: ${state:-no answer}); see $dir/ctld.log, $dir/d.log"
