"""Fixtures for check tests (the factories live in tests/usecases/check/factories.py)."""

from tests.usecases.check.fixtures import _offline, write_spec

__all__ = ["_offline", "write_spec"]
