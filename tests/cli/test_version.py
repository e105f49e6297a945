import json
import subprocess
import sys

from kvplan.sources.installed import default_release


def test_version_json_is_data_only():
    out = subprocess.run(
        [sys.executable, "-m", "kvplan", "version", "--json"], capture_output=True, text=True, check=True
    )
    record = json.loads(out.stdout)
    assert record["vllm_semantics"] == default_release().version
    assert record["supported_vllm_versions"] == ["0.17.1", "0.33.0", "0.34.0"]
    assert record["schema_version"] == 1


def test_version_names_the_releases_and_why_the_default():
    out = subprocess.run([sys.executable, "-m", "kvplan", "version"], capture_output=True, text=True, check=True)
    first, releases, default, origin = out.stdout.splitlines()
    assert origin.startswith("installed from: ")
    assert first.endswith(f"(vLLM {default_release().version} semantics)")
    assert releases == "reproduces vLLM 0.17.1, 0.33.0, 0.34.0; --vllm-version chooses one"
    assert default.startswith(f"default {default_release().version}: ")


def test_the_version_flag_prints_the_first_line_of_the_version_command(kvplan):
    flag = kvplan("--version")
    command = kvplan("version")
    assert flag[0] == command[0] == 0 and flag[1].startswith("kvplan 0.")
    assert flag[1].splitlines() == command[1].splitlines()[:1]
