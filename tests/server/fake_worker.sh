#!/bin/sh
# A stand-in for adworker in the supervisor's unit tests (the integration tests use the real
# one). It honours the launch contract (`train` + WorkerAssignment flags, common/worker_contract.h)
# and behaves as the spec's `name` says.
spec="" rank=0 world=1 attempt=1
while [ $# -gt 0 ]; do
  case "$1" in
    --spec) spec="$2"; shift 2 ;;
    --rank) rank="$2"; shift 2 ;;
    --world-size) world="$2"; shift 2 ;;
    --attempt) attempt="$2"; shift 2 ;;
    *) shift ;;
  esac
done
name=$(sed -n 's/^name: *//p' "$spec" | head -1 | tr -d "\"'")
echo "fake worker: name=$name rank=$rank world=$world attempt=$attempt"
case "$name" in
  ok) exit 0 ;;
  fatal) exit 2 ;;
  crash) exit 1 ;;
  crash-rank1)
    # Rank 1 fails once rank 0 stands ready to stop cleanly (its trap set), however slow the
    # machine is to start rank 0's shell.
    ready="$(dirname "$spec")/rank0-ready"
    if [ "$rank" = 1 ]; then
      for _ in $(seq 200); do [ -e "$ready" ] && break; sleep 0.05; done
      exit 1
    fi
    trap 'exit 75' TERM
    touch "$ready"
    sleep 30 &
    wait
    exit 75 ;;
  sleep)
    # Hands its attempt's token to the test that plays this rank (adctld keeps only its hash).
    printf %s "$ADCTL_TOKEN" > "$(dirname "$spec")/token.tmp" &&
      mv "$(dirname "$spec")/token.tmp" "$(dirname "$spec")/token-$attempt-$rank"
    trap 'exit 75' TERM
    # Long enough for a test that floods adctld with reports under ASan on a busy machine (a
    # rank that ended takes its attempt's token with it); the tests cancel it.
    sleep 120 &
    wait
    exit 75 ;;
  stubborn)
    trap '' TERM
    sleep 30 ;;
  *) exit 2 ;;
esac
