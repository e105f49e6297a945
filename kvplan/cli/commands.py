"""Imports every command module so that each registers itself on the app."""

from kvplan.cli import version  # noqa: F401
from kvplan.cli import gpus  # noqa: F401
