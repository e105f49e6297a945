"""The hub access a command states, and what it leaves in the environment."""

from __future__ import annotations

import os

import pytest

from kvplan.hub import HubAccess, current_access, hub_access


def test_refused_access_holds_hf_hub_offline_for_the_command_only(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert current_access().allowed
    with hub_access(HubAccess(allowed=False, reason="--offline is given")):
        assert os.environ["HF_HUB_OFFLINE"] == "1"       # transformers and huggingface_hub obey it too
        assert current_access() == HubAccess(allowed=False, reason="--offline is given")
    assert "HF_HUB_OFFLINE" not in os.environ and current_access().allowed


@pytest.mark.parametrize("name", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_the_environment_forbids_what_a_command_allows(monkeypatch, name):
    monkeypatch.setenv(name, "1")
    with hub_access(HubAccess(allowed=True, revision="v2")):
        assert current_access() == HubAccess(allowed=False, reason="HF_HUB_OFFLINE is set", revision="v2")
