#!/usr/bin/env bash
# Creates the virtual environment and installs kvplan with every extra (torch and transformers for
# profile, Ray and pyarrow for sweep and fit, aiconfigurator-core for --step-time kernels, the test
# and lint tools).
# Without an NVIDIA driver it installs the CPU build of torch first, so that the `profile`
# extra's torch requirement is already met and pip never pulls a multi-GB CUDA build.
set -euo pipefail
venv=${1:-.venv}
python=${PYTHON:-python3}
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    # Local wheel on our machines; the PyTorch CPU index elsewhere.
    "${pip[@]}" "torch==2.13.0" 2>/dev/null \
        || "${pip[@]}" "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu
fi
"${pip[@]}" -e ".[profile,ray,parquet,perf,dev]"
