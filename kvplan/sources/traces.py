"""A replay trace file (docs/vllm/replay-contract.md §1), read and handed to the trace format's one
reader, `kvplan.semantics.engine.trace.parse_trace`: the semantics validate a document, this module
finds its bytes.

Every mistake is a KvplanError naming the trace, so that the CLI prints one line and exits with code 2."""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from kvplan.files import parse_json, read_input_text
from kvplan.semantics.engine.trace import Trace, parse_trace
from kvplan.sources.installed import default_release


def load_trace(path: str | PathLike[str], overrides: Mapping[str, Any] | None = None) -> Trace:
    """Read and validate a trace file; `overrides` (command-line options) replace config keys, and
    where neither names a release the default rule's applies (`installed.default_release`)."""
    path = Path(path)
    shown = str(path)
    hint = "a trace is one JSON object with 'config' and 'requests'"
    document = parse_json(read_input_text(path, shown), shown, hint)
    return parse_trace(document, overrides, source=shown, release=default_release())
