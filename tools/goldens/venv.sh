#!/bin/bash
# Build the CPU virtual environment that drives one vLLM release's own classes.
#
#   tools/goldens/venv.sh RELEASE DIR [WHEEL_DIR]
#
# RELEASE is 0.17.1, 0.33.0 or 0.34.0; DIR must not be inside the repository (a venv is ~3.5 GB).
# WHEEL_DIR, optional, is a folder holding a downloaded vllm-RELEASE-*.whl to install from.
# The pins are the ones the project's harness notes give for each release (see
# tools/goldens/README.md, "Where each file came from"): torch's CPU wheel, vLLM with --no-deps
# (vLLM pins a CUDA torch; nothing the harnesses run needs a kernel), then the import chain of
# vllm.v1.core.sched.scheduler within vLLM's own version bounds.
set -euo pipefail
REL=${1:?usage: venv.sh RELEASE DIR [WHEEL_DIR]}
V=${2:?usage: venv.sh RELEASE DIR [WHEEL_DIR]}
WHEEL_DIR=${3:-}
PY=${PYTHON:-python3}

vllm_install() {
  if [ -n "$WHEEL_DIR" ]; then
    "$V/bin/pip" install -q --no-deps --find-links "$WHEEL_DIR" "vllm==$REL"
  else
    "$V/bin/pip" install -q --no-deps "vllm==$REL"
  fi
}

case "$REL" in
  0.17.1)
    "$PY" -m venv "$V"
    "$V/bin/pip" install -q --upgrade pip
    "$V/bin/pip" install -q torch==2.13.0
    vllm_install
    # 0.17.1's recipe resolves these with their dependencies (no --no-deps).
    "$V/bin/pip" install -q numpy packaging psutil pyzmq regex msgspec pydantic cbor2 cachetools \
      cloudpickle py-cpuinfo pybase64 prometheus_client pillow gguf aiohttp diskcache \
      openai-harmony huggingface_hub "transformers>=4.56.0,<5" "xgrammar==0.1.29" \
      "llguidance>=1.3.0,<1.4.0" "openai>=1.99.1,<2.25.0"
    "$V/bin/pip" install -q einops loguru
    "$V/bin/pip" install -q --no-deps compressed-tensors
    CHECK="from vllm.v1.core.kv_cache_manager import KVCacheManager; from vllm.v1.core.kv_cache_utils import get_kv_cache_configs"
    ;;
  0.33.0|0.34.0)
    if [ "$REL" = 0.33.0 ]; then
      BOUNDS=("transformers>=5.16.1,<5.21.0" "huggingface_hub>=1.31.0,<3.0" "tokenizers>=0.23.2,<0.24.0"
              "opentelemetry-api>=1.27.0" filelock)
    else
      BOUNDS=("transformers>=5.16.1,<5.23.0" "huggingface_hub>=2.0.0,<3.0" "tokenizers>=0.23.3,<0.24.0"
              "opentelemetry-api>=1.45.1" "filelock>=4.2.4")
    fi
    "$PY" -m venv "$V"
    "$V/bin/pip" install -q torch==2.13.0
    vllm_install
    "$V/bin/pip" install -q --no-deps \
      packaging "pydantic>=2.12.0" pydantic-core typing-inspection annotated-types regex numpy cbor2 psutil "pyzmq>=25.0.0" \
      "${BOUNDS[@]}" "safetensors>=0.8.0" \
      tqdm pyyaml httpx2 httpcore2 h11 idna truststore urllib3 "requests>=2.33.0" "certifi>=2026.10.19" charset-normalizer \
      "aiohttp>=3.14.4" "multidict>=6.9.1" attrs yarl propcache aiohappyeyeballs aiosignal frozenlist \
      "openai>=2.25.0" sniffio anyio "oss-harmony>=0.0.11" "pillow>=13.0.0" pybase64 cachetools msgspec cloudpickle uvloop \
      py-cpuinfo "prometheus_client>=0.18.0" "fastapi>=0.133.0,<0.137.0" "starlette>=1.0.1" annotated-doc \
      partial-json-parser einops \
      "xgrammar==0.2.8" "apache-tvm-ffi==0.1.11" "llguidance>=1.7.0,<1.8.0" \
      compressed-tensors==0.17.0 loguru
    CHECK="import vllm.v1.core.sched.scheduler; from vllm.v1.core.kv_cache_planning import get_kv_cache_configs"
    ;;
  *)
    echo "venv.sh: no recipe for vLLM $REL (known: 0.17.1 0.33.0 0.34.0)" >&2
    exit 2
    ;;
esac
cd /tmp
HF_HUB_OFFLINE=1 "$V/bin/python" -c "$CHECK; import vllm; assert vllm.__version__ == '$REL', vllm.__version__; print('vLLM', vllm.__version__, 'ready in $V')"
