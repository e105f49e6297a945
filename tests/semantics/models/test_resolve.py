"""--model resolution: catalog, local paths, the Hugging Face cache layout, and failing fast offline."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import urllib.error

import pytest

from kvplan.errors import EXIT_BAD_INPUT, KvplanError
from kvplan.semantics.models import catalog_ids, resolve
from kvplan.semantics.models.catalog import CATALOG_DIR
from kvplan.semantics.models.resolve import fetch_from_hub, resolve_config

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}


@pytest.fixture
def hf_home(tmp_path, monkeypatch):
    for name in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf"


@pytest.fixture
def no_hub(monkeypatch):
    """Any attempt to reach the hub fails the test."""
    def refuse(url: str, timeout_s: float) -> bytes:
        raise AssertionError(f"the hub was asked for {url}")
    monkeypatch.setattr(resolve, "fetch_from_hub", refuse)


def test_catalog_lists_every_bundled_config_unchanged(data_dir):
    """Each bundled config.json is byte for byte the genuine file (sha256 recorded when it was copied)."""
    recorded = dict(reversed(line.split("  ")) for line in (data_dir / "model-configs.sha256").read_text().splitlines())
    names = sorted(path.removesuffix("/config.json") for path in recorded)
    assert sorted(model.replace("/", "--", 1) for model in catalog_ids()) == names
    assert "Qwen/Qwen2-0.5B-Instruct" in catalog_ids()
    for path, digest in recorded.items():
        assert hashlib.sha256((CATALOG_DIR / path).read_bytes()).hexdigest() == digest, path
    assert (CATALOG_DIR / "SOURCES.md").is_file()


def test_catalog_id_resolves_without_the_hub(no_hub, hf_home):
    resolved = resolve_config("qwen/qwen2-0.5b-instruct")
    assert (resolved.model_id, resolved.source) == ("Qwen/Qwen2-0.5B-Instruct", "catalog")
    data = (CATALOG_DIR / "Qwen--Qwen2-0.5B-Instruct" / "config.json").read_bytes()
    assert resolved.sha256 == hashlib.sha256(data).hexdigest()
    assert resolved.config["num_hidden_layers"] == 24


def test_nemotron_infinity_token_parses(no_hub):
    config = resolve_config("nvidia/Nemotron-H-56B-Base-8K").config
    assert config["time_step_limit"] == [0.0, float("inf")]


def test_local_directory_and_config_path(tmp_path, no_hub):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    by_dir, by_file = resolve_config(str(tmp_path)), resolve_config(str(tmp_path / "config.json"))
    assert by_dir.source == by_file.source == "local"
    assert by_dir.path == by_file.path == str(tmp_path / "config.json")
    assert by_dir.config == TINY and by_dir.sha256 == by_file.sha256


def test_directory_without_config_is_bad_input(tmp_path):
    with pytest.raises(KvplanError, match=r"holds no config\.json") as error:
        resolve_config(str(tmp_path))
    assert error.value.exit_code == EXIT_BAD_INPUT


@pytest.mark.parametrize(("text", "why"), [("{\"a\": 1,", "malformed JSON"), ("[1, 2]", "JSON object")])
def test_malformed_config_names_the_file(tmp_path, text, why):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(KvplanError, match=why) as error:
        resolve_config(str(path))
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_missing_path_is_not_taken_for_a_hub_id(tmp_path):
    with pytest.raises(KvplanError, match="no such file"):
        resolve_config(str(tmp_path / "nope" / "config.json"))


def _snapshot(hf_home, repo: str, revision: str, config: dict) -> str:
    snapshot = hf_home / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(config))
    return str(snapshot / "config.json")


def test_hf_cache_follows_refs_main(hf_home, no_hub):
    _snapshot(hf_home, "acme/tiny", "aaa", {**TINY, "num_hidden_layers": 3})
    pinned = _snapshot(hf_home, "acme/tiny", "bbb", TINY)
    (hf_home / "hub" / "models--acme--tiny" / "refs").mkdir()
    (hf_home / "hub" / "models--acme--tiny" / "refs" / "main").write_text("bbb\n")
    resolved = resolve_config("acme/tiny")
    assert (resolved.source, resolved.path, resolved.config["num_hidden_layers"]) == ("hf-cache", pinned, 2)


def test_hf_cache_without_refs_takes_the_newest_snapshot(hf_home, no_hub):
    older = _snapshot(hf_home, "acme/tiny", "aaa", {**TINY, "num_hidden_layers": 3})
    newer = _snapshot(hf_home, "acme/tiny", "bbb", TINY)
    os.utime(older, (1_000_000, 1_000_000))
    assert resolve_config("acme/tiny").path == newer


def test_unknown_id_offline_fails_fast_in_one_line(hf_home, no_hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(KvplanError) as error:
        resolve_config("acme/not-a-model")
    message = str(error.value)
    assert "\n" not in message and error.value.exit_code == EXIT_BAD_INPUT
    for part in ("acme/not-a-model", "catalog", "cache", "HF_HUB_OFFLINE", "kvplan models", "local"):
        assert part in message


def test_unknown_id_with_unreachable_hub(hf_home, monkeypatch):
    asked = []

    def unreachable(url: str, timeout_s: float) -> bytes:
        asked.append((url, timeout_s))
        raise urllib.error.URLError("Name or service not known")
    monkeypatch.setattr(resolve, "fetch_from_hub", unreachable)
    with pytest.raises(KvplanError, match="hub is unreachable \\(Name or service not known\\)"):
        resolve_config("acme/not-a-model")
    assert asked == [("https://huggingface.co/acme/not-a-model/resolve/main/config.json", resolve.HUB_TIMEOUT_S)]


def test_hub_without_the_model(hf_home, monkeypatch):
    def missing(url: str, timeout_s: float) -> bytes:
        raise urllib.error.HTTPError(url, 404, "Not Found", None, None)
    monkeypatch.setattr(resolve, "fetch_from_hub", missing)
    with pytest.raises(KvplanError, match=r"no public config\.json for it \(HTTP 404\)"):
        resolve_config("acme/not-a-model")


def test_hub_answer_is_parsed(hf_home, monkeypatch):
    monkeypatch.setattr(resolve, "fetch_from_hub", lambda url, timeout_s: json.dumps(TINY).encode())
    resolved = resolve_config("acme/tiny")
    assert (resolved.source, resolved.config) == ("hub", TINY)


def test_fetch_gives_up_on_a_silent_server():
    """A server that accepts and never answers must not hold the caller past the deadline."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    try:
        with pytest.raises((OSError, TimeoutError)):
            fetch_from_hub(f"http://127.0.0.1:{server.getsockname()[1]}/config.json", 0.3)
    finally:
        server.close()
