"""The bundled catalog: genuine Hugging Face `config.json` files shipped inside the package, so that
a hub id in it resolves without the network (provenance: kvplan/data/models/SOURCES.md), and the
weight layouts of their meta-device builds, precomputed by scripts/compute_catalog_weights.py into
kvplan/data/weights.json, so that planning a catalog model needs neither torch nor transformers."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from kvplan.semantics.weights import WeightLayout, layout_from_json

CATALOG_DIR = Path(__file__).resolve().parents[1] / "data" / "models"
WEIGHTS_FILE = Path(__file__).resolve().parents[1] / "data" / "weights.json"
WEIGHTS_SCHEMA_VERSION = 1


def _dir_to_id(name: str) -> str:
    org, _, repo = name.partition("--")
    return f"{org}/{repo}"


def catalog_ids() -> list[str]:
    """Hub ids of the bundled configs, e.g. "Qwen/Qwen2-0.5B-Instruct", sorted case-insensitively."""
    ids = [_dir_to_id(entry.name) for entry in CATALOG_DIR.iterdir() if (entry / "config.json").is_file()]
    return sorted(ids, key=str.lower)


def catalog_config_path(model_id: str) -> tuple[str, Path] | None:
    """The canonical id and config path of a catalog model; hub ids are matched case-insensitively,
    as the hub does."""
    wanted = model_id.lower()
    for canonical in catalog_ids():
        if canonical.lower() == wanted:
            return canonical, CATALOG_DIR / canonical.replace("/", "--", 1) / "config.json"
    return None


def close_catalog_ids(model_id: str, limit: int = 3) -> tuple[str, ...]:
    """Catalog ids spelled like `model_id` (a typo, another organisation, a missing suffix), closest
    first, for a did-you-mean."""
    import difflib

    ids = catalog_ids()
    by_lower = {canonical.lower(): canonical for canonical in ids}
    wanted = model_id.lower()
    close = difflib.get_close_matches(wanted, list(by_lower), n=limit, cutoff=0.75)
    # the same name under another organisation, or the name alone ("Llama-3.1-8B-Instruct")
    name = wanted.rsplit("/", 1)[-1]
    by_name = {canonical.lower().rsplit("/", 1)[-1]: canonical.lower() for canonical in ids}
    close += [by_name[hit] for hit in difflib.get_close_matches(name, list(by_name), n=limit, cutoff=0.8)]
    return tuple(dict.fromkeys(by_lower[hit] for hit in close))[:limit]


@cache
def catalog_layouts() -> dict[str, WeightLayout]:
    """The precomputed layouts, keyed by the sha256 of the config.json they were built from."""
    if not WEIGHTS_FILE.is_file():
        return {}
    data = json.loads(WEIGHTS_FILE.read_text())
    if data.get("schema_version") != WEIGHTS_SCHEMA_VERSION:
        return {}
    layouts = (layout_from_json(entry) for entry in data["models"].values())
    return {layout.config_sha256: layout for layout in layouts}
