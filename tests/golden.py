"""The golden trace records in tests/data/traces: which trace, release and scheduling mode each
file holds, and how records are compared (docs/vllm/replay-contract.md §4)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRACES = Path(__file__).parent / "data" / "traces"
# NAME.vllm-0.17.1.jsonl is 0.17.1's synchronous loop; every other file names its mode.
RECORDS = re.compile(r"(?P<name>.+)\.vllm-(?P<version>\d+\.\d+\.\d+)(?:\.(?P<mode>sync|async))?\.jsonl")
# Informational summary keys (docs/vllm/replay-contract.md §4, docs/vllm/replay-0.33.md §2.6); a
# record's `usage` is compared approximately.
INFORMATIONAL_SUMMARY_KEYS = {"config", "vllm_version", "vllm_semantics", "driver", "driver_check", "schema_version",
                              "scheduling", "engine", "token_check"}


@dataclass(frozen=True)
class GoldenCase:
    name: str
    vllm_version: str
    scheduling: str
    path: Path

    @property
    def trace(self) -> Path:
        return TRACES / f"{self.name}.json"

    @property
    def id(self) -> str:
        return f"{self.name}-{self.vllm_version}-{self.scheduling}"

    @property
    def engine(self) -> dict[str, str]:
        """The trace config keys that select this case's release and mode."""
        return {"vllm_version": self.vllm_version, "scheduling": self.scheduling}

    @property
    def is_hybrid(self) -> bool:
        return "kv_cache_groups" in json.loads(self.trace.read_text())["config"]

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.path.read_text().splitlines()]


def golden_cases() -> list[GoldenCase]:
    cases = []
    for path in sorted(TRACES.glob("*.vllm-*.jsonl")):
        match = RECORDS.fullmatch(path.name)
        assert match is not None, f"unexpected record file name {path.name}"
        cases.append(GoldenCase(match["name"], match["version"], match["mode"] or "sync", path))
    return cases


# Records committed ahead of kvplan's support for their release, made by tools/goldens from vLLM's own
# classes so that the release work has them to match (issue 20 adds vLLM 0.34.0). They are left out
# of GOLDEN_CASES, which every golden test uses, and run in tests/semantics/engine/test_golden_traces.py
# as strict xfails with this reason: when kvplan reproduces them the xfail fails, and the release's
# entry goes (then every golden test picks the records up).
# releases whose records came before kvplan replays them (strict expected failures until then)
PENDING_RELEASES: dict[str, str] = {}
ALL_CASES = golden_cases()
GOLDEN_CASES = [case for case in ALL_CASES if case.vllm_version not in PENDING_RELEASES]
PENDING_CASES = [case for case in ALL_CASES if case.vllm_version in PENDING_RELEASES]


def normalised(record: dict[str, Any]) -> dict[str, Any]:
    """A record without the keys the contract leaves out of the comparison."""
    if "summary" in record:
        return {k: v for k, v in record["summary"].items() if k not in INFORMATIONAL_SUMMARY_KEYS}
    return {k: v for k, v in record.items() if k != "usage"}
