"""Find the `config.json` behind `--model`: a local directory or file, the bundled catalog, the local
Hugging Face cache, then the hub. The hub is asked last, only when the command may use the network
(`kvplan.hub.current_access`: never for `check` unless --allow-network, never with --offline or
HF_HUB_OFFLINE), and through huggingface_hub, so that HF_TOKEN, the saved login, --revision and the
hub cache work as they do for transformers. What is found is a `ResolvedConfig`
(`semantics/models/config_file.py`), checked against `MODEL_CONFIG` before any shape is derived."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError
from kvplan.files import parse_json, read_input_bytes
from kvplan.hub import current_access, fetch_config
from kvplan.schema import check_document
from kvplan.semantics.models.config_file import ResolvedConfig, Source
from kvplan.semantics.models.config_format import MODEL_CONFIG, rope_problem
from kvplan.sources.catalog import catalog_config_path, close_catalog_ids

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
MAX_CONFIG_BYTES = 64 << 20     # a config.json is a few KiB; the largest known are under 1 MiB


def local_model_path(model: str) -> Path | None:
    """The file or directory `--model` names on disk, or None for a hub id."""
    try:
        local = Path(model).expanduser()
        return local if local.exists() else None
    except (OSError, ValueError, RuntimeError):
        return None


def model_named_in_file(model: str, base_dir: Path) -> str:
    """A model a file names (a workload's engine.model, a spec's target.model): a path relative to
    the file, made absolute; an absolute path; else a hub id. A relative name that exists only
    beside the working directory is refused, as it would mean another model from another directory."""
    path = Path(model).expanduser()
    if path.is_absolute():
        return model
    beside = base_dir / path
    if local_model_path(str(beside)) is not None:
        return str(beside)
    if local_model_path(model) is not None:
        raise KvplanError(f"{model!r} is not beside the file (in {base_dir}) but in the current directory: paths "
                          "in a file are relative to the file; write the path from there, or an absolute one")
    return model


def resolve_config(model: str) -> ResolvedConfig:
    """Resolve `--model` (hub id, directory holding config.json, or a config.json path)."""
    local = local_model_path(model)
    if local is not None:
        path = local / "config.json" if local.is_dir() else local
        if not path.is_file():
            raise KvplanError(f"{local} holds no config.json: point --model at a model directory or its config.json")
        return _from_bytes(model, "local", str(path), _read(path))
    if not _HUB_ID.match(model) or model.endswith(".json"):
        raise KvplanError(f"--model {model!r}: no such file or directory, and not a Hugging Face hub id")

    access = current_access()
    found = catalog_config_path(model) if access.revision is None else None
    if found is not None:
        canonical, path = found
        return _from_bytes(canonical, "catalog", str(path), _read(path))

    cached = hf_cache_config_path(model, access.revision)
    if cached is not None:
        return _from_bytes(model, "hf-cache", str(cached), _read(cached))

    close = close_catalog_ids(model)
    if not access.allowed:
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        where = f"not in kvplan's catalog{hint} or the local Hugging Face cache ({hf_hub_cache_dir()})"
        advice = "give a local model directory or config.json path, or run `kvplan models` to list the catalog"
        raise KvplanError(f"model {model!r} is {where}, and {access.reason}: {advice}")
    data, cached_at = fetch_config(model, access, close=close)
    return _from_bytes(model, "hub", cached_at, data)


def hf_hub_cache_dir() -> Path:
    """Where huggingface_hub keeps downloads: HF_HUB_CACHE, else $HF_HOME/hub, else the XDG default."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def hf_cache_config_path(model_id: str, revision: str | None = None) -> Path | None:
    """config.json of the cached snapshot `revision` names (a ref such as main, or a commit), else of
    the newest snapshot holding one when no revision is asked for."""
    repo = hf_hub_cache_dir() / ("models--" + model_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    wanted = revision or "main"
    if _COMMIT.match(wanted) and (snapshots / wanted / "config.json").is_file():
        return snapshots / wanted / "config.json"
    ref = repo / "refs" / wanted
    if ref.is_file():
        pinned = snapshots / ref.read_text().strip() / "config.json"
        if pinned.is_file():
            return pinned
    if revision is not None:
        return None
    candidates = [snap / "config.json" for snap in snapshots.iterdir() if (snap / "config.json").is_file()]
    return max(candidates, key=lambda path: path.stat().st_mtime, default=None)


def _read(path: Path) -> bytes:
    return read_input_bytes(path, str(path), MAX_CONFIG_BYTES)


def _from_bytes(model_id: str, source: Source, path: str, data: bytes) -> ResolvedConfig:
    config = parse_config(data, path)
    check_document(MODEL_CONFIG, config, path)
    problem = rope_problem(config)
    if problem is not None:
        raise KvplanError(f"{path}: {problem}")
    return ResolvedConfig(model_id, source, path, config, hashlib.sha256(data).hexdigest())


def parse_config(data: bytes, path: str) -> dict[str, Any]:
    """Parse config.json; Python's json accepts the `Infinity` that Nemotron-H's file holds."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise KvplanError(f"{path}: malformed config (not UTF-8): fix the file or point --model elsewhere") from None
    config = parse_json(text, path, "fix the file or point --model elsewhere")
    if not isinstance(config, dict):
        raise KvplanError(f"{path}: a config.json must hold a JSON object, found {type(config).__name__}")
    return config
