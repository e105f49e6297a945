#!/usr/bin/env bash
# The checks that need a real GPU, as one short run for a machine with one (the `device` tool's
# H200 image already holds torch with CUDA, transformers, typer, rich, pytest and hypothesis, so
# nothing is installed). From the repository root:
#
#     scripts/device_check.sh [OUTDIR]        (default: $OUT, else ./device-check)
#
# 1. tests/measure/test_cuda_device.py and test_cuda.py on the GPU (skipped everywhere else);
# 2. Llama-3.1-8B-Instruct (bundled config, dummy weights) profiled by the cuda backend and
#    predicted by the fake backend for the same GPU, in both vLLM releases: OUTDIR/<backend>-<release>.json;
# 3. the terms side by side (OUTDIR/compare.txt): what the fake backend predicts against what the GPU
#    measured, the accuracy docs/accuracy.md claims and issue 13 asks about.
# About 3 minutes on an H200. It writes nothing outside OUTDIR.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-device-check}}"
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
python=${PYTHON:-python3}
status=0

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
"$python" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

"$python" -m pytest -q -p no:cacheprovider tests/measure/test_cuda_device.py tests/measure/test_cuda.py \
    2>&1 | tee "$out/pytest.txt" || status=1

gpu_key=${GPU_KEY:-h200-141gb}
model=meta-llama/Llama-3.1-8B-Instruct
for release in 0.17.1 0.33.0; do
    "$python" -m kvplan profile --model "$model" --backend cuda --vllm-version "$release" --json \
        >"$out/cuda-$release.json" 2>"$out/cuda-$release.err" || status=1
    "$python" -m kvplan profile --model "$model" --backend fake --gpu "$gpu_key" --vllm-version "$release" \
        --json >"$out/fake-$release.json" 2>"$out/fake-$release.err" || status=1
done

"$python" - "$out" <<'EOF' | tee "$out/compare.txt"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
terms = ["total_bytes", "weights_bytes", "activation_peak_bytes", "transient_peak_bytes", "non_torch_bytes",
         "total_consumed_bytes", "cuda_graph_estimate_bytes", "available_kv_bytes", "num_blocks"]
for release in ("0.17.1", "0.33.0"):
    docs = {}
    for backend in ("cuda", "fake"):
        path = out / f"{backend}-{release}.json"
        try:
            docs[backend] = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            print(f"{path.name}: no JSON ({error}); see {path.stem}.err")
    if len(docs) < 2:
        continue
    print(f"\nvLLM {release}: {'term':<28}{'cuda (measured)':>20}{'fake (predicted)':>20}{'fake - cuda':>16}")
    for term in terms:
        measured, predicted = docs["cuda"].get(term), docs["fake"].get(term)
        if isinstance(measured, int) and isinstance(predicted, int):
            scale = 1 if term == "num_blocks" else 2**30
            unit = "" if term == "num_blocks" else " GiB"
            print(f"{'':14}{term:<28}{measured / scale:>16.3f}{unit:4}{predicted / scale:>16.3f}{unit:4}"
                  f"{(predicted - measured) / scale:>12.3f}{unit}")
        else:
            print(f"{'':14}{term:<28}{measured!s:>20}{predicted!s:>20}")
    how = (docs["cuda"].get("cuda_graph_estimate") or {}).get("how")
    if how:
        print(f"{'':14}graphs: {how}")
EOF
exit $status
