"""A model's config.json as it was read: its object, where it came from and the digest of its bytes.
Finding and reading it (a local directory, the bundled catalog, the Hugging Face cache, the hub) is
`kvplan.sources.models`; what the semantics derive from it reads only this record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Source = Literal["catalog", "local", "hf-cache", "hub"]


@dataclass(frozen=True)
class ResolvedConfig:
    model_id: str
    source: Source
    path: str                 # file path, or where the hub download was cached
    config: dict[str, Any]
    sha256: str               # of the file's bytes
