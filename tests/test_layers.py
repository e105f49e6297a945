"""kvplan's layers import only downward, function-level imports included:

    0 foundation   kvplan (version), errors, limits, units, parsing, files, hub, gpus, schema
    1 semantics    vLLM's semantics in pure Python (never torch or transformers), reading nothing
                   itself: no files, no environment, no network (below)
    2 sources      where models, traces and the default release come from (files, the hub, the
                   installed vllm), then
      measure      memory backends, KV tensors, transformers models (torch lives here)
    3 usecases     plan, profile, replay, simulate, check: typed requests in, typed results out
    4 report       every renderer
    5 cli          parse, call, render

Inside semantics and usecases the subpackages are ordered too (below), so that no two of them
import each other. The light paths (semantics, sources, and the plan, replay, simulate and check use
cases with their reports) never import torch or transformers, not even lazily, and nothing they import
at module level does."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

KVPLAN = Path(__file__).resolve().parents[1] / "kvplan"

# (layer, rank): an import must go to a lower layer, or within a layer to a lower rank or the
# same group (the first match of a module's name wins)
ORDER: tuple[tuple[str, int, int], ...] = (
    ("kvplan.cli", 5, 0),
    ("kvplan.__main__", 5, 1),
    ("kvplan.report", 4, 0),
    ("kvplan.usecases.plan", 3, 0),
    ("kvplan.usecases.replay", 3, 0),
    ("kvplan.usecases.profile_summary", 3, 1),
    ("kvplan.usecases.measured_sizing", 3, 1),
    ("kvplan.usecases.profile_workload", 3, 4),
    ("kvplan.usecases.profile", 3, 2),
    ("kvplan.usecases.simulate", 3, 3),
    ("kvplan.usecases.check", 3, 4),
    ("kvplan.usecases.bench", 3, 4),
    ("kvplan.usecases.executors", 3, 0),
    ("kvplan.usecases.planner", 3, 3),
    ("kvplan.usecases.profile_plan", 3, 3),
    ("kvplan.usecases.configuration", 3, 4),
    ("kvplan.usecases.explain", 3, 5),
    ("kvplan.usecases.fit", 3, 5),
    ("kvplan.usecases.sweep", 3, 5),
    ("kvplan.usecases", 3, 0),
    ("kvplan.measure", 2, 1),
    ("kvplan.sources", 2, 0),
    ("kvplan.semantics.releases", 1, 0),
    ("kvplan.semantics.dtypes", 1, 0),
    ("kvplan.semantics.models", 1, 1),
    ("kvplan.semantics.config", 1, 2),
    ("kvplan.semantics.kv", 1, 3),
    ("kvplan.semantics.weights_from_config", 1, 4),
    ("kvplan.semantics.weights", 1, 3),
    ("kvplan.semantics.memory", 1, 4),
    ("kvplan.semantics.engine", 1, 5),
    ("kvplan.semantics", 1, 0),
    ("kvplan.errors", 0, 0),
    ("kvplan.limits", 0, 0),
    ("kvplan.units", 0, 1),
    ("kvplan.parsing", 0, 1),
    ("kvplan.files", 0, 1),
    ("kvplan.hub", 0, 1),
    ("kvplan.hostmem", 0, 1),
    ("kvplan.gpus", 0, 1),
    ("kvplan.data", 0, 1),
    ("kvplan.schema", 0, 2),
    ("kvplan", 0, 0),
)
HEAVY = ("torch", "transformers")
LIGHT = (
    "kvplan.errors", "kvplan.limits", "kvplan.units", "kvplan.parsing", "kvplan.files", "kvplan.hub",
    "kvplan.hostmem", "kvplan.schema",
    "kvplan.gpus", "kvplan.semantics", "kvplan.sources",
    "kvplan.usecases.plan", "kvplan.usecases.replay", "kvplan.usecases.profile_summary", "kvplan.usecases.simulate",
    "kvplan.usecases.check", "kvplan.usecases.bench", "kvplan.report.bench_console",
    "kvplan.report.plan_json", "kvplan.report.simulate_json", "kvplan.report.sim_",
    "kvplan.report.check_", "kvplan.report.replay_", "kvplan.report.plan_console",
)


@dataclass(frozen=True)
class Import:
    source: str          # the importing module
    target: str          # the imported module (a kvplan module, or a top-level package name)
    line: int
    module_level: bool   # executed on import (not inside a function, nor only for type checkers)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(KVPLAN.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {module_name(path): path for path in KVPLAN.rglob("*.py")}


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"))


def imports_of(name: str, path: Path, modules: set[str]) -> list[Import]:
    """Every import of the module, with the kvplan module each one names."""
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, module_level: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) or _is_type_checking(child):
                visit(child, False)
            else:
                if isinstance(child, ast.Import):
                    for alias in child.names:
                        found.append(Import(name, _known(alias.name, modules), child.lineno, module_level))
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:
                        package = name.split(".") if is_package else name.split(".")[:-1]
                        package = package[: len(package) - child.level + 1]
                        base = ".".join([*package, *([child.module] if child.module else [])])
                    for alias in child.names:
                        target = f"{base}.{alias.name}"
                        found.append(Import(name, target if target in modules else _known(base, modules),
                                            child.lineno, module_level))
                visit(child, module_level)

    visit(ast.parse(path.read_text(encoding="utf-8")), True)
    return found


def _known(target: str, modules: set[str]) -> str:
    """The kvplan module an import names (a package's `__init__` for a package), else its top name."""
    if not target.startswith("kvplan"):
        return target.split(".")[0]
    while target not in modules and "." in target:
        target = target.rsplit(".", 1)[0]
    return target


def place(module: str) -> tuple[str, int, int]:
    """(group, layer, rank) of a kvplan module."""
    for prefix, layer, rank in ORDER:
        if module == prefix or module.startswith(prefix + "."):
            return prefix, layer, rank
    raise AssertionError(f"{module} is in no layer: add it to ORDER")


def violations(edges: list[Import]) -> list[str]:
    """The imports that go up, or sideways to a group of a higher (or equal) rank."""
    bad = []
    for edge in edges:
        if not edge.target.startswith("kvplan"):
            continue
        (source_group, source_layer, source_rank) = place(edge.source)
        (target_group, target_layer, target_rank) = place(edge.target)
        if target_layer < source_layer or target_group == source_group:
            continue
        if target_layer == source_layer and target_rank < source_rank:
            continue
        bad.append(f"{edge.source}:{edge.line} imports {edge.target} "
                   f"(layer {source_layer}.{source_rank} -> {target_layer}.{target_rank})")
    return bad


@pytest.fixture(scope="module")
def graph() -> list[Import]:
    modules = _modules()
    names = set(modules)
    return [edge for name, path in sorted(modules.items()) for edge in imports_of(name, path, names)]


def test_every_module_has_a_layer():
    for module in _modules():
        place(module)


def test_imports_go_down_only(graph):
    assert not violations(graph), "\n".join(violations(graph))


def test_the_light_paths_never_import_torch_or_transformers(graph):
    direct = [f"{e.source}:{e.line} imports {e.target}" for e in graph
              if e.target in HEAVY and e.source.startswith(LIGHT)]
    assert not direct, direct
    # nor does anything they import when they are imported
    module_level: dict[str, set[str]] = {}
    for edge in graph:
        if edge.module_level:
            module_level.setdefault(edge.source, set()).add(edge.target)
    for start in {e.source for e in graph if e.source.startswith(LIGHT)}:
        seen, todo = {start}, [start]
        while todo:
            for target in module_level.get(todo.pop(), ()):
                assert target not in HEAVY, f"importing {start} imports {target} (through {sorted(seen)})"
                if target.startswith("kvplan") and target not in seen:
                    seen.add(target)
                    todo.append(target)


# --- the semantics read nothing --------------------------------------------------------------------

# Layer 1 takes what it needs already read (a dict, a text, a release): finding and reading files,
# the environment, the installed vllm and the hub is kvplan.sources' (issue 19). A module that reads
# (the standard library's file, process and network modules, kvplan's readers) is never imported,
# not even inside a function, and nothing is opened, loaded from a file or located from __file__.
UNREAD_MODULES = (
    "os", "pathlib", "io", "importlib", "urllib", "http", "socket", "shutil", "tempfile", "glob", "fileinput",
    "subprocess", "huggingface_hub", "requests",
    "kvplan.files", "kvplan.hub", "kvplan.hostmem", "kvplan.gpus", "kvplan.data", "kvplan.sources",
)
UNREAD_BUILTINS = ("open", "input", "__file__")
# module attributes that read a file or the process's environment (json.loads of a text is parsing)
UNREAD_ATTRIBUTES = {"json": ("load", "dump"), "sys": ("path", "argv", "stdin", "stdout", "stderr")}
UNREAD_METHODS = ("read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "open")


def reads_of(name: str, path: Path, modules: set[str]) -> list[str]:
    """What the module does that reads or writes outside its arguments, in line order."""
    found = [(edge.line, 0, f"imports {edge.target}") for edge in imports_of(name, path, modules)
             if any(edge.target == unread or edge.target.startswith(unread + ".") for unread in UNREAD_MODULES)]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Name) and node.id in UNREAD_BUILTINS:
            found.append((node.lineno, node.col_offset, f"uses {node.id}"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.attr in UNREAD_ATTRIBUTES.get(node.value.id, ()):
            found.append((node.lineno, node.col_offset, f"uses {node.value.id}.{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found += [(node.lineno, node.col_offset, f"imports {node.module}.{alias.name}") for alias in node.names
                      if alias.name in UNREAD_ATTRIBUTES.get(node.module or "", ())]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in UNREAD_METHODS:
            found.append((node.lineno, node.col_offset, f"calls .{node.func.attr}()"))
    return [f"{name}:{line} {what}" for line, _, what in sorted(set(found))]


def test_the_semantics_read_no_file_environment_or_network():
    modules = _modules()
    names = set(modules)
    found = [read for name, path in sorted(modules.items()) if name == "kvplan.semantics" or
             name.startswith("kvplan.semantics.") for read in reads_of(name, path, names)]
    assert not found, "\n".join(found)


def test_what_the_semantics_read_before_kvplan_sources_is_refused(tmp_path):
    # the reads the semantics made before kvplan.sources held them (models.resolve, models.catalog,
    # engine.trace, releases, weights), in one probe
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os\n"
        "from pathlib import Path\n"
        "from kvplan.files import parse_json\n"
        "from kvplan import hub\n"
        "import json, sys\n"
        "from json import dumps, load\n"
        "HERE = Path(__file__).parent\n"
        "def installed(path):\n"
        "    import importlib.metadata\n"
        "    with open(path) as headers:\n"
        "        return json.load(headers), sys.path, HERE.read_text(), os.environ\n")
    found = reads_of("kvplan.semantics.probe", probe, {"kvplan.semantics.probe", "kvplan.files", "kvplan.hub"})
    assert [line.split(" ", 1)[1] for line in found] == [
        "imports os", "imports pathlib", "imports kvplan.files", "imports kvplan.hub", "imports json.load",
        "uses __file__",
        "imports importlib", "uses open", "uses json.load", "uses sys.path", "calls .read_text()"]


# --- the checker finds what it is meant to find --------------------------------------------------

# the cycle issue 10 found, its edges named as the modules are named now
ISSUE_10_CYCLE = [
    Import("kvplan.usecases.plan", "kvplan.usecases.profile", 420, False),          # plan_for_device
    Import("kvplan.usecases.profile", "kvplan.usecases.plan", 46, True),
    Import("kvplan.usecases.simulate.engine_source", "kvplan.usecases.plan", 153, False),
    Import("kvplan.usecases.profile_workload", "kvplan.usecases.simulate.driver", 40, True),
    Import("kvplan.usecases.check.quick", "kvplan.report.check_console", 92, False),
    Import("kvplan.report.check_console", "kvplan.usecases.check.evaluate", 10, True),
    Import("kvplan.usecases.simulate.driver", "kvplan.report.jsonout", 14, True),     # sim/result
]


def test_the_cycle_of_issue_10_is_refused():
    found = violations(ISSUE_10_CYCLE)
    assert [line.split(":")[0] for line in found] == ["kvplan.usecases.plan", "kvplan.usecases.check.quick",
                                                      "kvplan.usecases.simulate.driver"]


@pytest.mark.parametrize(("source", "target"), [
    ("kvplan.semantics.kv.sizing", "kvplan.measure.kv_tensors"),          # semantics reaching for torch code
    ("kvplan.semantics.config.cache", "kvplan.semantics.kv.specs"),       # config below kv
    ("kvplan.measure.fake", "kvplan.usecases.plan"),
    ("kvplan.usecases.simulate.driver", "kvplan.usecases.check.target"),
    ("kvplan.report.plan_json", "kvplan.cli.options"),
    ("kvplan.units", "kvplan.gpus.catalog"),
])
def test_an_upward_import_is_refused(source, target):
    assert violations([Import(source, target, 1, False)])


def test_function_level_and_relative_imports_are_seen(tmp_path):
    module = tmp_path / "kvplan" / "semantics" / "kv" / "probe.py"
    module.parent.mkdir(parents=True)
    module.write_text("def f():\n    from ..config import cache\n    import torch\n")
    names = {"kvplan.semantics.kv.probe", "kvplan.semantics.config.cache"}
    edges = imports_of("kvplan.semantics.kv.probe", module, names)
    assert [(e.target, e.module_level) for e in edges] == [("kvplan.semantics.config.cache", False),
                                                           ("torch", False)]
