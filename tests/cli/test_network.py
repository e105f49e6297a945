"""Issue 12's second finding: no network unless asked. A stand-in hub on 127.0.0.1 records every
request: `check` makes none (unless --allow-network), `--offline` and HF_HUB_OFFLINE=1 stop every
command, and the commands that may fetch say so on stderr and go through huggingface_hub (token,
revision, cache)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.standin_hub import TINY, TOKEN, StandinHub, hub_env, standin_hub

pytest.importorskip("huggingface_hub")

UNKNOWN = "acme/tiny"


def kvplan(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvplan", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=120)


def spec(directory: Path, model: str = UNKNOWN) -> Path:
    path = directory / "spec.toml"
    path.write_text(f'[target]\nmodel = "{model}"\nkv_cache_memory = "1GiB"\n\n[[assert]]\nfits = true\n')
    return path


def workload(directory: Path) -> Path:
    path = directory / "workload.json"
    path.write_text(json.dumps({
        "schema_version": 1, "engine": {"model": UNKNOWN, "kv_cache_memory": "1GiB"},
        "timing": {"step_time_ms": 10}, "classes": [{"prompt_tokens": 8, "output_tokens": 2}],
        "arrival": {"process": "all_at_once", "count": 2}}))
    return path


def test_check_asks_nothing_of_the_network(tmp_path: Path) -> None:
    with standin_hub() as hub:
        done = kvplan("check", str(spec(tmp_path)), "--json", cwd=tmp_path, env=hub_env(hub, str(tmp_path / "hf")))
        assert hub.requests == []
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"kvplan: error: model '{UNKNOWN}' is not in kvplan's catalog or the local Hugging Face cache "
        f"({tmp_path / 'hf' / 'hub'}), and kvplan check uses no network unless --allow-network is given: give a "
        "local model directory or config.json path, or run `kvplan models` to list the catalog")


def test_check_fetches_when_allowed(tmp_path: Path) -> None:
    with standin_hub() as hub:
        done = kvplan("check", str(spec(tmp_path)), "--allow-network", cwd=tmp_path,
                      env=hub_env(hub, str(tmp_path / "hf")))
        paths = [path for _, path, _ in hub.requests]
    assert done.returncode == 0, done.stderr
    assert f"/{UNKNOWN}/resolve/main/config.json" in paths
    assert f"fetching config.json of {UNKNOWN}" in done.stderr
    # cached now: the next run asks nothing, even without --allow-network
    with standin_hub() as hub:
        again = kvplan("check", str(spec(tmp_path)), cwd=tmp_path, env=hub_env(hub, str(tmp_path / "hf")))
        assert again.returncode == 0 and hub.requests == []


@pytest.mark.parametrize(("command", "offline"), [
    (("plan", "--model", UNKNOWN, "--kv-cache-memory", "1GiB"), ("--offline",)),
    (("plan", "--model", UNKNOWN, "--kv-cache-memory", "1GiB"), ()),
    (("simulate", "workload.json"), ("--offline",)),
    (("check", "spec.toml", "--allow-network"), ("--offline",)),
    (("profile", "--model", UNKNOWN, "--backend", "fake", "--gpu", "l4-24gb", "--no-allocate"), ("--offline",)),
])
def test_offline_stops_every_command(tmp_path: Path, command: tuple[str, ...], offline: tuple[str, ...]) -> None:
    spec(tmp_path)
    workload(tmp_path)
    extra = {} if offline else {"HF_HUB_OFFLINE": "1"}
    with standin_hub() as hub:
        done = kvplan(*command, *offline, "--json", cwd=tmp_path, env=hub_env(hub, str(tmp_path / "hf"), **extra))
        assert hub.requests == []
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.splitlines()) == 1
    assert ("--offline is given" if offline else "HF_HUB_OFFLINE is set") in done.stderr


@pytest.mark.parametrize("command", [("plan", "--kv-cache-memory", "1GiB", "--json", "--model", UNKNOWN),
                                     ("simulate", "workload.json", "--json")])
def test_plan_and_simulate_fetch_and_say_so(tmp_path: Path, command: tuple[str, ...]) -> None:
    workload(tmp_path)
    with standin_hub() as hub:
        done = kvplan(*command, cwd=tmp_path, env=hub_env(hub, str(tmp_path / "hf")))
        paths = [path for _, path, _ in hub.requests]
    assert done.returncode == 0, done.stderr
    assert f"/{UNKNOWN}/resolve/main/config.json" in paths
    assert f"kvplan: fetching config.json of {UNKNOWN} from the Hugging Face hub" in done.stderr
    json.loads(done.stdout)


def test_gated_models_take_the_token_and_revisions_their_snapshot(tmp_path: Path) -> None:
    hub = StandinHub(repos={"acme/gated": {"main": TINY, "v2": {**TINY, "num_hidden_layers": 3}}},
                     gated={"acme/gated"})
    args = ("plan", "--model", "acme/gated", "--kv-cache-memory", "1GiB", "--json")
    with standin_hub(hub):
        refused = kvplan(*args, cwd=tmp_path, env=hub_env(hub, str(tmp_path / "hf")))
        assert refused.returncode == 2 and "gated model" in refused.stderr and "HF_TOKEN" in refused.stderr
        done = kvplan(*args, "--revision", "v2", cwd=tmp_path,
                      env=hub_env(hub, str(tmp_path / "hf"), HF_TOKEN=TOKEN))
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["num_hidden_layers"] == 3
        assert ("HEAD", "/acme/gated/resolve/v2/config.json", f"Bearer {TOKEN}") in hub.requests
        missing = kvplan(*args, "--revision", "v9", cwd=tmp_path,
                         env=hub_env(hub, str(tmp_path / "hf"), HF_TOKEN=TOKEN))
        assert missing.returncode == 2 and "has no revision 'v9'" in missing.stderr
