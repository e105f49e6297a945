"""Find the `config.json` behind `--model`: a local directory or file, the bundled catalog, the local
Hugging Face cache, then the hub. The hub is asked last, never when HF_HUB_OFFLINE is set, and never
for long: on our machines it is unreachable, and a planning tool must not hang on it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kvplan.errors import KvplanError
from kvplan.semantics.models.catalog import catalog_config_path

Source = Literal["catalog", "local", "hf-cache", "hub"]

HUB_TIMEOUT_S = 4.0
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")
_TRUTHY = {"1", "on", "yes", "true"}


@dataclass(frozen=True)
class ResolvedConfig:
    model_id: str
    source: Source
    path: str                 # file path, or the URL the hub answered from
    config: dict[str, Any]
    sha256: str               # of the file's bytes


def resolve_config(model: str) -> ResolvedConfig:
    """Resolve `--model` (hub id, directory holding config.json, or a config.json path)."""
    local = Path(model).expanduser()
    if local.exists():
        path = local / "config.json" if local.is_dir() else local
        if not path.is_file():
            raise KvplanError(f"{local} holds no config.json: point --model at a model directory or its config.json")
        return _from_bytes(model, "local", str(path), _read(path))
    if not _HUB_ID.match(model) or model.endswith(".json"):
        raise KvplanError(f"--model {model!r}: no such file or directory, and not a Hugging Face hub id")

    found = catalog_config_path(model)
    if found is not None:
        canonical, path = found
        return _from_bytes(canonical, "catalog", str(path), _read(path))

    cached = hf_cache_config_path(model)
    if cached is not None:
        return _from_bytes(model, "hf-cache", str(cached), _read(cached))

    where = f"not in kvplan's catalog or the local Hugging Face cache ({hf_hub_cache_dir()})"
    advice = "give a local model directory or config.json path, or run `kvplan models` to list the catalog"
    if hub_offline():
        raise KvplanError(f"model {model!r} is {where}, and HF_HUB_OFFLINE is set: {advice}")
    url = f"{os.environ.get('HF_ENDPOINT', 'https://huggingface.co').rstrip('/')}/{model}/resolve/main/config.json"
    import urllib.error  # only here: importing it costs the offline planning path 20 ms

    try:
        data = fetch_from_hub(url, HUB_TIMEOUT_S)
    except urllib.error.HTTPError as error:
        raise KvplanError(
            f"model {model!r} is {where}, and the hub has no public config.json for it "
            f"(HTTP {error.code}): {advice}"
        ) from None
    except (OSError, TimeoutError) as error:
        reason = str(getattr(error, "reason", "") or error) or type(error).__name__
        raise KvplanError(f"model {model!r} is {where}, and the hub is unreachable ({reason}): {advice}") from None
    return _from_bytes(model, "hub", url, data)


def hub_offline() -> bool:
    names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    return any(os.environ.get(name, "").strip().lower() in _TRUTHY for name in names)


def hf_hub_cache_dir() -> Path:
    """Where huggingface_hub keeps downloads: HF_HUB_CACHE, else $HF_HOME/hub, else the XDG default."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def hf_cache_config_path(model_id: str) -> Path | None:
    """config.json of the snapshot `refs/main` points at, else of the newest snapshot holding one."""
    repo = hf_hub_cache_dir() / ("models--" + model_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / "main"
    if ref.is_file():
        pinned = snapshots / ref.read_text().strip() / "config.json"
        if pinned.is_file():
            return pinned
    candidates = [snap / "config.json" for snap in snapshots.iterdir() if (snap / "config.json").is_file()]
    return max(candidates, key=lambda path: path.stat().st_mtime, default=None)


def fetch_from_hub(url: str, timeout_s: float) -> bytes:
    """GET `url` within `timeout_s` in total. The socket timeout does not bound name resolution, so
    the request runs in a daemon thread that is abandoned when the deadline passes."""
    import urllib.request

    outcome: dict[str, Any] = {}

    def get() -> None:
        try:
            request = urllib.request.Request(url, headers={"User-Agent": "kvplan"})
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                outcome["data"] = response.read()
        except Exception as error:  # handed to the caller's thread
            outcome["error"] = error

    worker = threading.Thread(target=get, daemon=True)
    worker.start()
    worker.join(timeout_s)
    if "data" in outcome:
        return outcome["data"]
    raise outcome.get("error") or TimeoutError(f"no answer within {timeout_s:g} s")


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise KvplanError(f"cannot read {path}: {error.strerror or error}") from None


def _from_bytes(model_id: str, source: Source, path: str, data: bytes) -> ResolvedConfig:
    return ResolvedConfig(model_id, source, path, parse_config(data, path), hashlib.sha256(data).hexdigest())


def parse_config(data: bytes, path: str) -> dict[str, Any]:
    """Parse config.json; Python's json accepts the `Infinity` that Nemotron-H's file holds."""
    try:
        config = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise KvplanError(f"{path}: malformed config (not UTF-8): fix the file or point --model elsewhere") from None
    except json.JSONDecodeError as error:
        raise KvplanError(
            f"{path}: malformed JSON ({error.msg} at line {error.lineno} column {error.colno}): "
            "fix the file or point --model elsewhere"
        ) from None
    if not isinstance(config, dict):
        raise KvplanError(f"{path}: a config.json must hold a JSON object, found {type(config).__name__}")
    return config
