"""The Hugging Face hub: whether this command may reach it, and fetching a model's config.json
through huggingface_hub when it may.

Only commands whose documentation says so use the network: `plan`, `profile` and `simulate` fetch
the config.json of a hub id that is neither in kvplan's catalog nor in the local Hugging Face cache
(and say so on stderr); `check` only with `--allow-network`; `--offline` and `HF_HUB_OFFLINE=1`
forbid it everywhere. The command line states its access once:

    with hub_access(HubAccess(allowed=..., reason=..., revision=...)):
        ...                                   # resolve_config() asks current_access()

and, while access is refused, HF_HUB_OFFLINE=1 holds for the process, so that transformers and
huggingface_hub stay offline too."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_TRUTHY = {"1", "on", "yes", "true"}
FETCH_TIMEOUT_S = 30.0
# one request, this long, tells whether the hub answers at all before huggingface_hub is asked
# (which retries a connection that fails five times, with back-off, before it gives up)
REACH_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class HubAccess:
    allowed: bool = True
    reason: str = ""                  # why the hub may not be asked, for the error line
    revision: str | None = None       # branch, tag or commit of the hub repo (default: main)


_ACCESS: ContextVar[HubAccess | None] = ContextVar("kvplan_hub_access", default=None)


def env_offline() -> bool:
    return any(os.environ.get(name, "").strip().lower() in _TRUTHY for name in OFFLINE_VARIABLES)


def current_access() -> HubAccess:
    """The access the running command stated (library use: allowed unless HF_HUB_OFFLINE is set)."""
    access = _ACCESS.get() or HubAccess()
    if access.allowed and env_offline():
        return replace(access, allowed=False, reason="HF_HUB_OFFLINE is set")
    return access


@contextlib.contextmanager
def hub_access(access: HubAccess) -> Iterator[HubAccess]:
    token = _ACCESS.set(access)
    saved = {name: os.environ.get(name) for name in OFFLINE_VARIABLES}
    if not access.allowed:
        os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield access
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _ACCESS.reset(token)


def hub_endpoint() -> str:
    """The hub huggingface_hub talks to: HF_ENDPOINT, else huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def unreachable_reason(endpoint: str, timeout_s: float = REACH_TIMEOUT_S) -> str | None:
    """Why the hub at `endpoint` cannot be reached (no answer, refused, no such host), from one
    request with one short timeout; None when it answers anything at all (an HTTP error included)."""
    import socket
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(endpoint + "/", method="HEAD"), timeout=timeout_s):
            return None
    except urllib.error.HTTPError:
        return None                       # it answered
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, socket.timeout | TimeoutError):
            return f"no answer within {timeout_s:g} s"
        return _reason(reason) if isinstance(reason, BaseException) else str(reason)


def fetch_config(model_id: str, access: HubAccess, timeout_s: float = FETCH_TIMEOUT_S,
                 close: tuple[str, ...] = ()) -> tuple[bytes, str]:
    """The bytes of a hub repo's config.json and the path huggingface_hub cached it at: the token of
    HF_TOKEN or the saved login (gated models), `access.revision`, the hub cache. `close`: catalog
    models of a similar name, offered when the hub has none or cannot be reached."""
    assert access.allowed
    endpoint = hub_endpoint()
    unreachable = unreachable_reason(endpoint, min(REACH_TIMEOUT_S, timeout_s))
    if unreachable is not None:
        raise KvplanError(
            f"model {model_id!r} is not in kvplan's catalog{_did_you_mean(close)} nor in the local Hugging Face "
            f"cache, and the hub ({endpoint}) is unreachable ({unreachable}): use --offline with a bundled or "
            "cached model, or give a local model directory or config.json path")
    where = f" at revision {access.revision}" if access.revision else ""
    print(f"kvplan: fetching config.json of {model_id}{where} from the Hugging Face hub "
          "(not in kvplan's catalog nor in the local cache)", file=sys.stderr)
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise KvplanError(f"model {model_id!r} is not in kvplan's catalog nor in the local Hugging Face cache, and "
                          "fetching it needs huggingface_hub: `pip install huggingface_hub`, or give a local "
                          "config.json") from None
    outcome: dict[str, Any] = {}

    def download() -> None:
        try:
            outcome["path"] = hf_hub_download(model_id, "config.json", revision=access.revision)
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error

    # name resolution is not bounded by the library's timeouts: wait in this thread for so long only
    worker = threading.Thread(target=download, daemon=True)
    worker.start()
    worker.join(timeout_s)
    if "path" in outcome:
        path = Path(outcome["path"])
        return path.read_bytes(), str(path)
    error = outcome.get("error")
    raise KvplanError(_fetch_failure(model_id, access, error, timeout_s, close)) from None


def _did_you_mean(close: tuple[str, ...]) -> str:
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def _fetch_failure(model_id: str, access: HubAccess, error: BaseException | None, timeout_s: float,
                   close: tuple[str, ...] = ()) -> str:
    from huggingface_hub import errors

    where = (f"model {model_id!r} is not in kvplan's catalog{_did_you_mean(close)} nor in the local Hugging Face "
             "cache, and the hub")
    advice = "give a local model directory or config.json path, or run `kvplan models` to list the catalog"
    if error is None:
        return f"{where} did not answer within {timeout_s:g} s: {advice}"
    if isinstance(error, errors.GatedRepoError):
        return (f"{model_id} is a gated model: accept its licence on huggingface.co, then set HF_TOKEN or run "
                "`hf auth login`")
    if isinstance(error, errors.RepositoryNotFoundError):
        return (f"{where} has no such repository (or it is private: set HF_TOKEN or run `hf auth login`): "
                f"{advice}")
    if isinstance(error, errors.RevisionNotFoundError):
        return f"{model_id} has no revision {access.revision!r} on the hub: give a branch, tag or commit it has"
    if isinstance(error, errors.EntryNotFoundError):
        return f"{model_id} has no config.json on the hub{_did_you_mean(close)}: {advice}"
    if isinstance(error, errors.LocalEntryNotFoundError | errors.OfflineModeIsEnabled | OSError):
        return f"{where} is unreachable ({_reason(error)}): {advice}, or retry when the network is up"
    if isinstance(error, errors.HfHubHTTPError):
        return f"{where} answered with an error ({_reason(error)}): {advice}"
    if isinstance(error, KeyboardInterrupt):
        raise error
    return f"{where} could not be asked ({type(error).__name__}: {_reason(error)}): {advice}"


def _reason(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return (text[:160] + "...") if len(text) > 160 else text or type(error).__name__
