#!/bin/bash
# Byte comparison of kvplan's outputs with the scheduler's bulk fast path (the default) and without
# it (KVPLAN_BULK_DECODE=0, semantics/engine/cruise.py): `replay --summary-only` of every golden
# trace and `simulate` (--json and console) of every example workload, in every release and both
# scheduling modes; `bench` adds the 10,000-request target of benchmarks/targets.py.
# Usage: scripts/compare_bulk_decode.sh [traces] [workloads] [bench]   (default: traces workloads)
set -u
cd "$(dirname "$0")/.."
KVPLAN=${KVPLAN:-kvplan}   # PYTHON: the interpreter that writes the bench workload (python3)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pairs=0; differ=0
compare() {  # name, kvplan arguments...
  local name=$1; shift
  # stderr's "still running, 10 s so far" lines tell wall-clock time, which no two runs share
  { KVPLAN_BULK_DECODE=1 "$KVPLAN" "$@"; echo "exit $?"; } 2>&1 | grep -v ': still running, ' > "$out/$name.bulk"
  { KVPLAN_BULK_DECODE=0 "$KVPLAN" "$@"; echo "exit $?"; } 2>&1 | grep -v ': still running, ' > "$out/$name.steps"
  pairs=$((pairs + 1))
  if ! cmp -s "$out/$name.bulk" "$out/$name.steps"; then differ=$((differ + 1)); echo "DIFFERS: kvplan $*"; fi
}
modes=("$@"); [ ${#modes[@]} -eq 0 ] && modes=(traces workloads)
for what in "${modes[@]}"; do
  for version in 0.17.1 0.33.0 0.34.0; do
    for scheduling in sync async; do
      case $what in
      traces)
        for trace in tests/data/traces/*.json; do
          compare "$(basename "$trace" .json)-$version-$scheduling" replay "$trace" --summary-only \
            --vllm-version "$version" --scheduling "$scheduling"
        done;;
      workloads)
        for workload in examples/workloads/*.json examples/checks/workloads/*.json; do
          name=$(basename "$workload" .json)-$version-$scheduling
          compare "$name-json" simulate "$workload" --json --vllm-version "$version" --scheduling "$scheduling"
          compare "$name-console" simulate "$workload" --vllm-version "$version" --scheduling "$scheduling"
        done;;
      bench)
        "${PYTHON:-python3}" -c 'import json, sys; sys.path.insert(0, "."); from benchmarks.targets import SIMULATE_10K; print(json.dumps(SIMULATE_10K))' > "$out/simulate-10k.json"
        compare "simulate-10k-$version-$scheduling" simulate "$out/simulate-10k.json" --json \
          --vllm-version "$version" --scheduling "$scheduling";;
      esac
    done
  done
done
echo "$pairs pairs compared, $differ differ"
[ "$differ" -eq 0 ]
