"""The bundled catalog: genuine Hugging Face `config.json` files shipped inside the package, so that
a hub id in it resolves without the network. Provenance is in data/models/SOURCES.md."""

from __future__ import annotations

from pathlib import Path

CATALOG_DIR = Path(__file__).resolve().parents[2] / "data" / "models"


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
