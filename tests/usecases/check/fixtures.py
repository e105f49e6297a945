"""Fixtures of the check tests and of the check reports' tests (their conftest.py files import them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kvplan.usecases.check.spec import CheckSpec
from tests.usecases.check.factories import spec_writer


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[..., CheckSpec]:
    return spec_writer(tmp_path)
