import json
import subprocess
import sys


def test_version_json_is_data_only():
    out = subprocess.run(
        [sys.executable, "-m", "kvplan", "version", "--json"], capture_output=True, text=True, check=True
    )
    record = json.loads(out.stdout)
    assert record["vllm_semantics"] == "0.17.1"
    assert record["schema_version"] == 1


def test_the_version_flag_prints_what_the_version_command_prints(kvplan):
    flag = kvplan("--version")
    assert flag == kvplan("version") and flag[0] == 0 and flag[1].startswith("kvplan 0.")
