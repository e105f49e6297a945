"""A mistyped model (issue 24, item 4): the catalog is looked at first and offers the id it
probably meant; a hub that cannot be reached is asked once, with one short timeout, and the
answer is one line that names --offline and a local path. No real network: the hubs here are a
closed port and a socket that accepts connections and never answers."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.hub import HubAccess, fetch_config
from kvplan.sources.catalog import close_catalog_ids

pytest.importorskip("huggingface_hub")

TYPO = "meta-llama/Llama-3.1-8B-Instrct"
MEANT = "meta-llama/Llama-3.1-8B-Instruct"


@contextmanager
def silent_hub() -> Iterator[tuple[str, list[int]]]:
    """A hub that accepts every connection and never says a word; the list counts the connections."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[int] = []
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            accepted.append(1)
            held.append(connection)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", accepted
    finally:
        server.close()
        for connection in held:
            connection.close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_catalog_offers_the_id_a_typo_meant():
    assert close_catalog_ids(TYPO)[0] == MEANT
    assert close_catalog_ids("unsloth/Llama-3.1-8B-Instruct")[0] == MEANT      # another organisation
    assert close_catalog_ids("acme/tiny") == ()


def test_a_silent_hub_is_asked_once_with_one_short_timeout(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with silent_hub() as (url, accepted):
        monkeypatch.setenv("HF_ENDPOINT", url)
        with pytest.raises(KvplanError) as error:
            fetch_config(TYPO, HubAccess(), timeout_s=0.5, close=(MEANT,))
    message = str(error.value)
    assert len(accepted) == 1           # huggingface_hub, with its five retries, was never started
    assert "is unreachable (no answer within 0.5 s)" in message
    assert f"did you mean {MEANT}?" in message and "--offline" in message and "local model directory" in message


def _plan(*args: str, endpoint: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {"HF_ENDPOINT": endpoint, "HF_HOME": str(home), "PATH": "", "NO_PROXY": "127.0.0.1",
           "no_proxy": "127.0.0.1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    return subprocess.run([sys.executable, "-m", "kvplan", "plan", *args, "--kv-cache-memory", "4GiB"],
                          capture_output=True, text=True, env=env, timeout=120)


def test_plan_with_the_hub_down_says_so_in_one_line(tmp_path):
    done = _plan(TYPO, endpoint=f"http://127.0.0.1:{closed_port()}", home=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith(f"kvplan: error: model '{TYPO}' is not in kvplan's catalog (did you mean {MEANT}")
    assert "is unreachable" in lines[0] and "use --offline" in lines[0]


def test_offline_a_typo_gets_the_did_you_mean_too(tmp_path):
    done = _plan(TYPO, "--offline", endpoint=f"http://127.0.0.1:{closed_port()}", home=tmp_path)
    assert done.returncode == 2 and f"did you mean {MEANT}" in done.stderr and "--offline is given" in done.stderr
