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
