"""Imports every command module so that each registers itself on the app."""
# ruff: noqa: I001  (one line per command, appended as commands are added)

from kvplan.cli import version  # noqa: F401
from kvplan.cli import gpus  # noqa: F401
from kvplan.cli import replay  # noqa: F401
from kvplan.cli import plan  # noqa: F401
from kvplan.cli import models  # noqa: F401
from kvplan.cli import simulate  # noqa: F401
from kvplan.cli import profile  # noqa: F401
from kvplan.cli import check  # noqa: F401
