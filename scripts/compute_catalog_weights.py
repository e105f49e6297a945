"""Precompute the parameter layout of every catalog model with a meta-device build and store it in
kvplan/data/weights.json, so that planning a catalog model needs neither torch nor transformers.

Run after changing the catalog: `.venv/bin/python scripts/compute_catalog_weights.py`.
tests/models/test_weights.py rebuilds the layouts and checks that they agree with the stored file."""

from __future__ import annotations

import json
import os
import sys
import time

from kvplan.measure.meta_build import build_layout
from kvplan.semantics.weights import layout_to_json
from kvplan.sources.catalog import WEIGHTS_FILE, WEIGHTS_SCHEMA_VERSION, catalog_ids
from kvplan.sources.models import resolve_config


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    models = {}
    for model_id in catalog_ids():
        started = time.perf_counter()
        layout = build_layout(resolve_config(model_id))
        models[model_id] = layout_to_json(layout)
        print(f"{model_id}: {layout.total_params:,} parameters in {len(layout.groups)} groups "
              f"({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    document = {"schema_version": WEIGHTS_SCHEMA_VERSION, "models": models}
    WEIGHTS_FILE.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {WEIGHTS_FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
