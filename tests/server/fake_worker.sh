#!/bin/sh
# A stand-in for adworker in the supervisor's unit tests (the integration tests use the real
# one). It honours the launch contract (argv/env) and behaves as the spec's `name` says.
spec=""
while [ $# -gt 0 ]; do
  case "$1" in
    --spec) spec="$2"; shift 2 ;;
    *) shift ;;
  esac
done
name=$(sed -n 's/^name: *//p' "$spec" | head -1 | tr -d "\"'")
echo "fake worker: name=$name rank=$RANK world=$WORLD_SIZE attempt=$ADCTL_ATTEMPT"
case "$name" in
  ok) exit 0 ;;
  fatal) exit 2 ;;
  crash) exit 1 ;;
  crash-rank1)
    if [ "$RANK" = 1 ]; then sleep 0.2; exit 1; fi
    trap 'exit 75' TERM
    sleep 30 &
    wait
    exit 75 ;;
  sleep)
    trap 'exit 75' TERM
    sleep 30 &
    wait
    exit 75 ;;
  stubborn)
    trap '' TERM
    sleep 30 ;;
  *) exit 2 ;;
esac
