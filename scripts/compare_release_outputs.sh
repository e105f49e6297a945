#!/bin/bash
# Byte comparison of kvplan's outputs for the releases before 0.34.0 (0.17.1 and 0.33.0, each named
# with --vllm-version) across a change that must not move them, such as the switch of the default
# release to 0.34.0 (issue 20: "Outputs for 0.17.1 and 0.33.0 are unchanged"). The commands: `plan
# --json` for a few catalog models and GPUs (and two console plans), `profile --json` on the fake
# backend, `replay` of every golden trace in tests/data/traces in both scheduling modes, `simulate`
# (--json and console) of every example workload, `check` of the example specs, `explain --json`
# of the bundled logs and `gpus --json`. Each output file holds stdout, then stderr, then the exit code.
# Usage:
#   scripts/compare_release_outputs.sh record DIR    # write the outputs under DIR (made empty first)
#   scripts/compare_release_outputs.sh compare DIR   # record into a temporary folder and diff it with DIR
# KVPLAN names the command (default: kvplan), e.g.
#   KVPLAN="env PYTHONPATH=$PWD .venv/bin/python -m kvplan" scripts/compare_release_outputs.sh record /tmp/base
set -u
cd "$(dirname "$0")/.."
read -r -a KV <<< "${KVPLAN:-kvplan}"
# VERSIONS="0.17.1 0.33.0 0.34.0" names the releases (default: the two before 0.34.0)
read -r -a VERSIONS <<< "${VERSIONS:-0.17.1 0.33.0}"

run() {  # name, kvplan arguments...
  local name=$1; shift
  "${KV[@]}" "$@" > "$dest/$name.out" 2> "$dest/$name.raw"
  echo "exit $?" >> "$dest/$name.raw"
  # a long phase's heartbeat ("still running, 607 ms so far") depends on the machine's speed, not on kvplan
  grep -v ': still running, ' "$dest/$name.raw" > "$dest/$name.err"; rm -f "$dest/$name.raw"
  cat "$dest/$name.out" "$dest/$name.err" > "$dest/$name" && rm -f "$dest/$name.out" "$dest/$name.err"
}

record() {  # folder
  dest=$1
  rm -rf "$dest" && mkdir -p "$dest"
  for v in "${VERSIONS[@]}"; do
    for cell in meta-llama/Llama-3.1-8B-Instruct:h100-sxm-80gb meta-llama/Llama-3.1-8B-Instruct:a100-sxm-80gb \
                meta-llama/Llama-3.1-8B-Instruct:l4-24gb Qwen/Qwen2-0.5B-Instruct:l4-24gb \
                google/gemma-2-9b-it:l40s-48gb deepseek-ai/DeepSeek-V2-Lite-Chat:h100-sxm-80gb \
                openai/gpt-oss-20b:h100-sxm-80gb Qwen/Qwen3-8B:a10g-24gb; do
      model=${cell%%:*}; gpu=${cell##*:}
      run "plan-$(basename "$model")-$gpu-$v.json" plan --model "$model" --gpu "$gpu" --json --vllm-version "$v"
    done
    run "plan-Llama-3.1-8B-Instruct-h100-131072-$v.json" plan --model meta-llama/Llama-3.1-8B-Instruct \
      --gpu h100-sxm-80gb --max-model-len 131072 --json --vllm-version "$v"
    run "plan-Qwen2-0.5B-Instruct-l4-$v.txt" plan --model Qwen/Qwen2-0.5B-Instruct --gpu l4-24gb --vllm-version "$v"
    run "plan-Llama-3.1-8B-Instruct-h100-$v.txt" plan --model meta-llama/Llama-3.1-8B-Instruct --gpu h100-sxm-80gb \
      --vllm-version "$v"
    for gpu in l4-24gb h100-sxm-80gb; do
      run "profile-Qwen2-0.5B-Instruct-$gpu-$v.json" profile --model Qwen/Qwen2-0.5B-Instruct --gpu "$gpu" \
        --backend fake --no-allocate --json --vllm-version "$v"
    done
    run "gpus-$v.json" gpus --json --vllm-version "$v"
    for scheduling in sync async; do
      for trace in tests/data/traces/*.json; do
        run "replay-$(basename "$trace" .json)-$v-$scheduling.jsonl" replay "$trace" \
          --vllm-version "$v" --scheduling "$scheduling"
      done
      for workload in examples/workloads/*.json examples/checks/workloads/*.json; do
        run "simulate-$(basename "$workload" .json)-$v-$scheduling.json" simulate "$workload" --json \
          --vllm-version "$v" --scheduling "$scheduling"
      done
    done
    for workload in examples/workloads/*.json examples/checks/workloads/*.json; do
      run "simulate-$(basename "$workload" .json)-$v.txt" simulate "$workload" --vllm-version "$v"
    done
    for spec in examples/checks/*.toml; do
      run "check-$(basename "$spec" .toml)-$v.json" check "$spec" --json --vllm-version "$v"
      run "check-$(basename "$spec" .toml)-$v.txt" check "$spec" --vllm-version "$v"
    done
    for log in tests/data/logs/*.log; do
      run "explain-$(basename "$log" .log)-$v.json" explain "$log" --json --vllm-version "$v"
    done
  done
}

case ${1:-} in
record)
  [ -n "${2:-}" ] || { echo "usage: $0 record DIR" >&2; exit 2; }
  record "$2"
  echo "recorded $(find "$2" -type f | wc -l) outputs under $2";;
compare)
  [ -d "${2:-}" ] || { echo "usage: $0 compare DIR (a folder written by: $0 record DIR)" >&2; exit 2; }
  base=$2; new=$(mktemp -d)
  trap 'rm -rf "$new"' EXIT
  record "$new"
  count=$(find "$new" -type f | wc -l)
  if diff -r "$base" "$new"; then
    echo "identical: $count outputs compared with $base"
  else
    echo "DIFFERENT: $count outputs compared with $base (diff above)"; exit 1
  fi;;
*)
  echo "usage: $0 record DIR | compare DIR" >&2; exit 2;;
esac
