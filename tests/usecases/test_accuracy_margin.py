"""The margin printed beside a predicted KV memory is what `kvplan explain` measures on the real
logs today: scripts/measure_log_accuracy.py --check recomputes it and fails on a stale file."""

from __future__ import annotations

from pathlib import Path

from tests.data_scripts import assert_up_to_date

REPO = Path(__file__).resolve().parents[2]


def test_the_margin_file_is_what_explain_measures_on_the_real_logs():
    assert_up_to_date("measure_log_accuracy.py")


def test_the_accuracy_page_quotes_the_margin_the_commands_print():
    from kvplan.usecases.accuracy import kv_memory_margin

    margin = kv_memory_margin()
    page = (REPO / "docs" / "accuracy.md").read_text()
    assert f"Median absolute difference **{margin.median_bytes / 2**30:.2f} GiB**" in page
    assert f"largest **{margin.max_bytes / 2**30:.2f} GiB**" in page
