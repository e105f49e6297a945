"""The vllm installed beside kvplan, and the release the default rule gives for it: when neither
--vllm-version nor the input file names a release, a command follows the installed vllm's when
kvplan reproduces it, else the newest (`semantics.releases.release_for_installed`; docs/versions.md).
The version is read from the package's metadata on `sys.path`; vllm itself is never imported.

The semantics never read it: a command resolves its release here, or from the user, and hands it
down (a request's `release`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from functools import cache

from kvplan.semantics.releases import NEWEST_RELEASE, Release, release_for_installed


def installed_vllm_version(search_path: Sequence[str] | None = None) -> str | None:
    """The version of the `vllm` distribution installed beside kvplan, from its package metadata
    (vllm itself is never imported); None when there is none. Found as importlib.metadata finds
    it, the first `vllm-*.dist-info` (or `vllm*.egg-info`) on `sys.path`, without importing
    importlib.metadata: 40 ms of every command's start."""
    for entry in sys.path if search_path is None else search_path:
        folder = entry or "."
        try:
            names = sorted(os.listdir(folder))
        except OSError:  # a zip file or a missing folder on the path
            continue
        for name in names:
            lower = name.lower()
            if lower.startswith("vllm-") and lower.endswith(".dist-info"):
                version = _metadata_version(os.path.join(folder, name, "METADATA"))
            elif lower.startswith(("vllm-", "vllm.")) and lower.endswith(".egg-info"):
                version = _metadata_version(os.path.join(folder, name, "PKG-INFO"))
            else:
                continue
            if version is not None:
                return version
    return None


def _metadata_version(path: str) -> str | None:
    """The `Version:` header of a METADATA / PKG-INFO file (the headers end at the first blank line)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as headers:
            for line in headers:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                if key.strip().lower() == "version":
                    return value.strip() or None
    except OSError:
        return None
    return None


@cache
def default_release() -> Release:
    """The release a command follows when neither --vllm-version nor the input file names one."""
    return release_for_installed(installed_vllm_version())


# The default rule's release in this process, for parameters that default to it
DEFAULT_RELEASE = default_release()


def default_release_reason() -> str:
    """Why `default_release()` is what it is, in words (`kvplan version`)."""
    installed = installed_vllm_version()
    chosen = default_release().version
    if installed is None:
        return f"no vllm package is installed, so the newest release kvplan reproduces ({chosen})"
    if release_for_installed(installed) is not NEWEST_RELEASE or installed.split("+", 1)[0] == chosen:
        return f"the installed vllm is {installed}"
    return f"the installed vllm {installed} is not a release kvplan reproduces, so the newest ({chosen})"
