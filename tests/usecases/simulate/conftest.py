"""Fixtures for the simulation tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.usecases.simulate.factories import write_workload


@pytest.fixture
def write_json(tmp_path: Path):
    def write(document: Any, name: str = "workload.json") -> Path:
        return write_workload(tmp_path, document, name)

    return write
