"""Kernel times measured on real GPUs, from NVIDIA's AIConfigurator database (the `perf` extra:
``pip install -e '.[perf]'`` in kvplan's clone, which installs ``aiconfigurator-core``).

aiconfigurator-core ships, per GPU ("system") and framework version, the times of the operators a
forward pass is made of (GEMMs, context and generation attention, all-reduce, MoE, norms), collected
on that GPU, as Parquet tables, and a compiled engine that interpolates them. ``KernelTables``
builds that engine for one model (its config.json), GPU, vLLM version slot, tensor/pipeline
parallelism and weight / KV-cache format, and answers the four prices a scheduled step is made of:

* ``token_ops_ms(tokens)``: every operator whose work follows the batch's token count (the linear
  layers, norms, activation, embedding, all-reduce under TP), at ``tokens`` tokens;
* ``logits_ms(requests)``: the lm_head GEMM, which vLLM runs only on the sampled rows;
* ``decode_attention_ms(batch, context)``: the generation-attention kernel for ``batch`` one-token
  queries against ``context`` KV tokens each;
* ``prefill_attention_ms(batch, tokens, prefix)``: the context-attention kernel for ``batch`` chunks
  of ``tokens`` new tokens after ``prefix`` computed ones.

Nothing here imports aiconfigurator-core at module level: ``open_tables`` does, when a step-time
model asks for measured kernels. Every failure (the extra missing, a GPU or format the database
does not cover, a model its builder cannot read) is a ``KernelsUnavailable`` with one line saying
why, so the caller can say so and fall back to the roofline.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

# kvplan's GPU catalog keys (kvplan/data/gpus/gpus.csv) -> aiconfigurator-core's system names
# (aiconfigurator_core/systems/<name>.yaml). Only exact matches: a 40 GB A100 or a PCIe H100 runs
# other clocks and power limits than the SXM parts the tables were collected on.
SYSTEMS: dict[str, str] = {
    "a100-sxm-80gb": "a100_sxm",
    "h100-sxm-80gb": "h100_sxm",
    "h200-141gb": "h200_sxm",
    "b200-180gb": "b200_sxm",
    "b300-288gb": "b300_sxm",
    "gb200-186gb": "gb200",
    "l40s-48gb": "l40s",
}
BACKEND = "vllm"
# kvplan's weight formats (usecases/simulate/compute_shape.py) -> the database's GEMM quant modes
GEMM_MODES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "int4": "int4_wo"}
# vLLM's --kv-cache-dtype -> the database's KV-cache quant modes ("auto": the model's dtype)
KV_MODES = {"auto": "bfloat16", "bfloat16": "bfloat16", "float16": "bfloat16", "fp16": "bfloat16",
            "bf16": "bfloat16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
ATTENTION_WORDS = ("attention", "mla", "dsa", "msa")


class KernelsUnavailable(Exception):
    """The measured kernels cannot price this setup; the message says why in one line."""


@dataclass(frozen=True)
class KernelQuery:
    """Everything the database's engine is built from (hashable: one engine per query)."""

    model_config: str           # the model's config.json, as JSON text
    gpu: str                    # kvplan's catalog key
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    weight_format: str = "bf16"
    kv_cache_dtype: str = "auto"


def installed_version() -> str | None:
    """aiconfigurator-core's version, or None when the `perf` extra is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("aiconfigurator-core")
    except PackageNotFoundError:
        return None


def covers(gpu: str) -> bool:
    return gpu in SYSTEMS


class KernelTables:
    """One compiled aiconfigurator-core engine and the indices of its operators by role."""

    def __init__(self, query: KernelQuery, engine: Any, version: str, package: str,
                 context_names: list[str], generation_names: list[str]) -> None:
        self.query = query
        self.system = SYSTEMS[query.gpu]
        self.framework_version = version
        self.package_version = package
        self._engine = engine
        self._token_ops = [i for i, name in enumerate(context_names)
                           if not _is_attention(name) and "logits" not in name]
        self._context_attention = [i for i, name in enumerate(context_names) if _is_attention(name)]
        self._generation_attention = [i for i, name in enumerate(generation_names) if _is_attention(name)]
        self._logits = [i for i, name in enumerate(generation_names) if "logits" in name]

    @property
    def source(self) -> str:
        return (f"aiconfigurator-core {self.package_version} database, {self.system}, "
                f"{BACKEND} {self.framework_version}")

    def token_ops_ms(self, tokens: int) -> float:
        return self._context(self._token_ops, 1, tokens, 0)

    def logits_ms(self, requests: int) -> float:
        if not requests or not self._logits:
            return 0.0
        return self._generation(self._logits, requests, 1)

    def decode_attention_ms(self, batch: int, context: int) -> float:
        if not batch or not self._generation_attention:
            return 0.0
        return self._generation(self._generation_attention, batch, max(1, context))

    def prefill_attention_ms(self, batch: int, tokens: int, prefix: int) -> float:
        if not batch or not tokens or not self._context_attention:
            return 0.0
        return self._context(self._context_attention, batch, tokens, prefix)

    def _context(self, indices: list[int], batch: int, s: int, prefix: int) -> float:
        if not indices:
            return 0.0
        rows = self._engine.evaluate_context_ops(indices, int(batch), int(s), int(prefix), 1.0, None)
        return float(sum(row[1] for row in rows))

    def _generation(self, indices: list[int], batch: int, s: int) -> float:
        rows = self._engine.evaluate_generation_ops(indices, int(batch), int(s), 1.0, 0, None)
        return float(sum(row[1] for row in rows))


def _is_attention(name: str) -> bool:
    return any(word in name for word in ATTENTION_WORDS)


@cache
def open_tables(query: KernelQuery) -> KernelTables:
    """The engine for ``query`` (built once per process: building reads the database's tables)."""
    package = installed_version()
    if package is None:
        raise KernelsUnavailable("measured kernels need the `perf` extra (pip install -e '.[perf]' in kvplan's clone)")
    system = SYSTEMS.get(query.gpu)
    if system is None:
        raise KernelsUnavailable(f"the aiconfigurator-core database has no measured kernels for {query.gpu} "
                                 f"(it covers {', '.join(sorted(SYSTEMS))})")
    gemm_mode = GEMM_MODES.get(query.weight_format)
    if gemm_mode is None:
        raise KernelsUnavailable(f"the measured kernels cannot price {query.weight_format} weights")
    kv_mode = KV_MODES.get(query.kv_cache_dtype)
    if kv_mode is None:
        raise KernelsUnavailable(f"the measured kernels cannot price a {query.kv_cache_dtype} KV cache")
    # the package logs every low-fidelity fallback table it loads at WARNING; kvplan's answer names
    # the database it used instead
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    try:
        import aiconfigurator_core
        from aiconfigurator_core.sdk import perf_database
        from aiconfigurator_core.sdk.engine import compile_engine
    except ImportError as error:
        raise KernelsUnavailable(f"aiconfigurator-core {package} does not import: {error}") from None
    try:
        slots = perf_database.get_version_slots(system, BACKEND) or {}
        version = slots.get("current")
        if not version:
            raise KernelsUnavailable(f"the aiconfigurator-core database has no {BACKEND} tables for {system}")
        cached = _spec_path(query, package, system, version)
        spec = _read_spec(cached)
        if spec is None:
            spec = bytes(compile_engine(str(_model_dir(query.model_config)), system, BACKEND, version,
                                        tp_size=query.tensor_parallel_size, pp_size=query.pipeline_parallel_size,
                                        gemm_quant_mode=gemm_mode, kvcache_quant_mode=kv_mode))
            _write_spec(cached, spec)
        engine = aiconfigurator_core.AicEngine.from_spec(spec, None)
        context = _op_names(lambda i: engine.evaluate_context_ops([i], 1, 1, 0, 1.0, None))
        generation = _op_names(lambda i: engine.evaluate_generation_ops([i], 1, 1, 1.0, 0, None))
    except KernelsUnavailable:
        raise
    except Exception as error:  # the package's builders raise many kinds; each means "not covered"
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise KernelsUnavailable(f"aiconfigurator-core cannot build this model on {system}: {first}") from None
    return KernelTables(query, engine, version, package, context, generation)


MAX_OPS = 4096


def _op_names(evaluate: Callable[[int], list[Any]]) -> list[str]:
    """The names of a compiled op list, in order: the engine answers each index until the last."""
    names: list[str] = []
    for index in range(MAX_OPS):
        try:
            rows = evaluate(index)
        except Exception:  # past the last op: the engine refuses the index
            break
        names.append(str(rows[0][0]))
    return names


def _spec_path(query: KernelQuery, package: str, system: str, version: str) -> Path | None:
    """Where the compiled engine of ``query`` is kept between runs (building it takes seconds; loading
    it, a fraction): the user's cache directory, keyed by everything the build reads."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = hashlib.sha256(repr((package, system, version, query)).encode("utf-8")).hexdigest()[:32]
    return Path(root) / "kvplan" / "kernel-specs" / f"{key}.bin"


def _read_spec(path: Path | None) -> bytes | None:
    try:
        return path.read_bytes() if path is not None and path.is_file() else None
    except OSError:
        return None


def _write_spec(path: Path | None, spec: bytes) -> None:
    """Keep the compiled engine; a cache that cannot be written only costs the next run the build."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(f"{path.name}.{os.getpid()}")
        scratch.write_bytes(spec)
        scratch.replace(path)
    except OSError:
        pass


def _model_dir(config_json: str) -> Path:
    """A directory holding the model's config.json, as aiconfigurator-core's model builder reads it
    (a local path: it never reaches the network). One per config, under the temporary directory."""
    digest = hashlib.sha256(config_json.encode("utf-8")).hexdigest()[:16]
    directory = Path(tempfile.gettempdir()) / f"kvplan-aic-model-{os.getuid()}-{digest}"
    directory.mkdir(exist_ok=True)
    target = directory / "config.json"
    if not target.exists() or target.read_text(encoding="utf-8") != config_json:
        scratch = directory / f"config.json.{os.getpid()}"
        scratch.write_text(config_json, encoding="utf-8")
        scratch.replace(target)
    return directory
