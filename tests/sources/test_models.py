"""--model resolution: catalog, local paths, the Hugging Face cache layout, and failing fast offline."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from kvplan.errors import EXIT_BAD_INPUT, KvplanError
from kvplan.hub import HubAccess, hub_access
from kvplan.sources import models
from kvplan.sources.catalog import CATALOG_DIR, catalog_ids
from kvplan.sources.models import resolve_config

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
    def refuse(model_id: str, access: HubAccess, **_: object) -> tuple[bytes, str]:
        raise AssertionError(f"the hub was asked for {model_id}")
    monkeypatch.setattr(models, "fetch_config", refuse)


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


@pytest.mark.parametrize(("text", "why"), [("{\"a\": 1,", "not valid JSON"), ("[1, 2]", "JSON object")])
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


def test_a_revision_picks_its_cached_snapshot_and_skips_the_catalog(hf_home, no_hub):
    _snapshot(hf_home, "acme/tiny", "aaa", {**TINY, "num_hidden_layers": 3})
    (hf_home / "hub" / "models--acme--tiny" / "refs").mkdir()
    (hf_home / "hub" / "models--acme--tiny" / "refs" / "v1").write_text("aaa")
    with hub_access(HubAccess(revision="v1")):
        assert resolve_config("acme/tiny").config["num_hidden_layers"] == 3
    with hub_access(HubAccess(allowed=False, reason="--offline is given", revision="v2")), \
            pytest.raises(KvplanError, match="--offline is given"):
        resolve_config("acme/tiny")
    # a revision is a hub revision: the bundled catalog copy is not it
    with hub_access(HubAccess(allowed=False, reason="--offline is given", revision="v9")), \
            pytest.raises(KvplanError, match="not in kvplan's catalog"):
        resolve_config("Qwen/Qwen2-0.5B-Instruct")


def test_a_command_without_network_access_never_fetches(hf_home, no_hub):
    with hub_access(HubAccess(allowed=False, reason="kvplan check uses no network unless --allow-network")), \
            pytest.raises(KvplanError, match="kvplan check uses no network unless --allow-network") as error:
        resolve_config("acme/not-a-model")
    assert os.environ.get("HF_HUB_OFFLINE") is None   # restored when the command ends
    assert "\n" not in str(error.value)


def test_hub_answer_is_parsed_and_validated(hf_home, monkeypatch):
    monkeypatch.setattr(models, "fetch_config", lambda model_id, access, **_: (json.dumps(TINY).encode(), "cached"))
    resolved = resolve_config("acme/tiny")
    assert (resolved.source, resolved.config) == ("hub", TINY)
    broken = {**TINY, "num_attention_heads": 0}
    monkeypatch.setattr(models, "fetch_config", lambda model_id, access, **_: (json.dumps(broken).encode(), "cached"))
    with pytest.raises(KvplanError, match=r"cached: num_attention_heads: 0 is out of range"):
        resolve_config("acme/tiny")
