"""tools/goldens rebuilds every golden trace record the repository keeps (`make goldens`).

Running vLLM takes its own venv and minutes, so this suite checks the plan, not the run: every
committed record is one that `tools/goldens/regen.py` writes (trace, release and mode, with the
harness of its release), and every record the tool would write is committed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "traces"


def regen():
    spec = importlib.util.spec_from_file_location("goldens_regen", ROOT / "tools" / "goldens" / "regen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def planned_records(tool) -> set[str]:
    return {tool.record_name(t.name, release, mode) for t in tool.TRACES for release in t.releases
            for mode in t.modes}


def test_every_committed_record_is_one_make_goldens_rebuilds():
    committed = {p.name for p in TRACES.glob("*.vllm-*.jsonl")}
    assert committed == planned_records(regen())


def test_each_release_runs_its_own_harnesses_on_the_committed_traces(tmp_path: Path):
    tool = regen()
    for release in tool.RELEASES:
        traces = [t for t in tool.TRACES if release in t.releases]
        commands = tool.harness_commands(release, traces, "PY", str(tmp_path))
        scripts = {Path(cmd[1]) for cmd in commands}
        assert all(s.parent.name == f"vllm-{release}" and s.is_file() for s in scripts), scripts
        named = {Path(arg).stem for cmd in commands for arg in cmd if arg.endswith(".json")}
        assert named == {t.name for t in traces}
        assert all((TRACES / f"{name}.json").is_file() for name in named)


def test_hybrid_traces_go_to_the_harnesses_that_read_their_groups(tmp_path: Path):
    tool = regen()
    for release, hybrid_script in (("0.17.1", "replay_hybrid_async.py"), ("0.33.0", "replay_hybrid33.py"),
                                   ("0.34.0", "replay_hybrid34.py")):
        for cmd in tool.harness_commands(release, [t for t in tool.TRACES if release in t.releases], "PY",
                                         str(tmp_path)):
            grouped = {tool.has_groups(Path(arg).stem) for arg in cmd if arg.endswith(".json")}
            if Path(cmd[1]).name == hybrid_script:
                assert grouped == {True}
            elif Path(cmd[1]).name not in ("replay.py", "replay_group_block_sizes.py"):  # these read the groups
                assert grouped == {False}, cmd
