"""The installed vllm: its version read from package metadata (never an import), and the release the
default rule gives for it."""

from __future__ import annotations

from kvplan.semantics.releases import VLLM_0_17_1
from kvplan.sources import installed


def test_the_default_reads_package_metadata_without_importing_vllm(monkeypatch, tmp_path):
    import sys
    from importlib import metadata

    site = tmp_path / "site-packages"
    (site / "vllm-0.17.1.dist-info").mkdir(parents=True)
    (site / "vllm-0.17.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm\nVersion: 0.17.1\n\nVersion: not a header\n")
    (site / "vllm_flash_attn-9.9.dist-info").mkdir()
    # the same answer importlib.metadata gives for this path
    assert [d.version for d in metadata.distributions(path=[str(site)]) if d.name == "vllm"] == ["0.17.1"]
    assert installed.installed_vllm_version([str(tmp_path / "missing"), str(site)]) == "0.17.1"
    assert installed.installed_vllm_version([str(tmp_path / "missing")]) is None

    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    installed.default_release.cache_clear()
    try:
        assert installed.default_release() is VLLM_0_17_1
        assert installed.default_release_reason() == "the installed vllm is 0.17.1"
    finally:
        installed.default_release.cache_clear()
    assert "vllm" not in sys.modules


def test_an_egg_info_checkout_is_read_too(tmp_path):
    (tmp_path / "vllm.egg-info").mkdir()
    (tmp_path / "vllm.egg-info" / "PKG-INFO").write_text("Name: vllm\nVersion: 0.33.0+cu128\n")
    assert installed.installed_vllm_version([str(tmp_path)]) == "0.33.0+cu128"
