"""The grid file of `kvplan sweep` (TOML): the axes, whose every combination is a cell, and the
commands each cell runs. docs/sweep.md is the reference.

    commands = ["plan", "simulate"]         # any of plan, profile, simulate

    [axes]
    models = ["meta-llama/Llama-3.1-8B-Instruct"]
    gpus = ["l4-24gb", "h100-sxm-80gb"]
    vllm_releases = ["0.17.1", "0.33.0"]
    tensor_parallel_size = [1, 2]
    kv_cache_dtype = ["auto", "fp8"]
    workloads = ["../workloads/chat-5rps.json"]

    [simulate]
    find_max_rate = false

Every mistake is one line naming the field (exit 2)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError
from kvplan.files import parse_toml, read_input_bytes, read_input_text
from kvplan.parsing import FieldError, as_bool, as_int, as_list, as_number, as_object, as_str, child, reject_unknown
from kvplan.schema import check_document
from kvplan.semantics.engine.args import EngineArgs, setting
from kvplan.semantics.releases import RELEASES, release_named
from kvplan.sources.installed import DEFAULT_RELEASE
from kvplan.sources.models import local_model_path, model_named_in_file
from kvplan.usecases.configuration import Configuration
from kvplan.usecases.simulate.workload import Workload, load_workload
from kvplan.usecases.sweep.grid_format import COMMANDS, ENGINE_AXES, GRID, HISTORICAL_ENGINE_AXES, axis_name

TOP_KEYS = ("$schema", "description", "commands", "axes", "simulate")
SIMULATE_KEYS = ("find_max_rate", "seed", "step_time_ms")
MAX_CELLS = 1_000_000


def _gpu(value: Any, path: str) -> str:
    from kvplan.gpus.catalog import get_gpu

    try:
        return get_gpu(as_str(value, path)).key
    except FieldError:
        raise
    except KvplanError as error:
        raise FieldError(path, str(error)) from None


def _release(value: Any, path: str) -> str:
    text = as_str(value, path)
    if text not in RELEASES:
        raise FieldError(path, f"one of {', '.join(RELEASES)} (the releases kvplan reproduces), got {text!r}")
    return text


def _engine_axis(name: str) -> Callable[[Any, str], Any]:
    """The reader of an engine argument's axis values: `EngineArgs`' one reader (`Setting.read`: a file's
    16.0 is the length 16, so the cell's id is the same), then vLLM's own rule on the value
    (`Setting.rule`: the dtype choices, ...), so that a value no cell could run is refused before the first."""
    declared = setting(name)

    def read(value: Any, path: str) -> Any:
        if declared.fixed_kind is not None:    # the axis's range, narrower than the setting's (no "auto")
            declared.fixed_kind.check(value, path)
        try:
            value = declared.read(value, path)
        except KvplanError as error:    # the message names the path already
            raise FieldError("", str(error)) from None
        try:
            return declared.vetted(value)
        except KvplanError as error:
            raise FieldError(path, str(error)) from None

    return read


def _scheduling(value: Any, path: str) -> str:
    text = as_str(value, path)
    if text not in ("sync", "async"):
        raise FieldError(path, f"sync or async, got {text!r}")
    return text


# axis -> (the Configuration field it sets (an engine axis: the `EngineArgs` field), or "" for workloads,
# the reader), in the order of the schema's axes (`grid_format.AXES`): the cells are their product in it
AXES: dict[str, tuple[str, Callable[[Any, str], Any]]] = {
    "models": ("model", as_str),
    "vllm_releases": ("release", _release),
    "gpus": ("gpu", _gpu),
    **{axis_name(name): (name, _engine_axis(name)) for name in ENGINE_AXES},
    "scheduling": ("scheduling", _scheduling),
    "workloads": ("", as_str),
}


@dataclass(frozen=True)
class GridSimulateTable:
    """The grid's [simulate] table: what every cell's simulate command adds to its workload."""

    find_max_rate: bool = False
    seed: int | None = None
    step_time_ms: float | None = None


@dataclass(frozen=True)
class GridWorkload:
    given: str                  # the path as the grid writes it
    sha256: str                 # of the file's bytes: a resumed cell holds only for the same traffic
    workload: Workload


@dataclass(frozen=True)
class Cell:
    index: int                  # in the grid's order
    cell_id: str                # from everything that decides its row: resume skips rows with this id
    configuration: Configuration
    workload: GridWorkload | None
    commands: tuple[str, ...]
    simulate: GridSimulateTable


@dataclass(frozen=True)
class Grid:
    name: str
    commands: tuple[str, ...]
    axes: tuple[tuple[str, tuple[Any, ...]], ...]     # in AXES order, only those given
    workloads: tuple[GridWorkload, ...]
    simulate: GridSimulateTable
    inputs: tuple[Path, ...]                          # the grid and every file it reads

    @property
    def size(self) -> int:
        count = 1
        for _, values in self.axes:
            count *= len(values)
        return count

    def cells(self) -> list[Cell]:
        names = [name for name, _ in self.axes]
        workloads = {w.given: w for w in self.workloads}
        cells = []
        for index, values in enumerate(product(*(values for _, values in self.axes))):
            chosen = dict(zip(names, values, strict=True))
            settings = {AXES[name][0]: value for name, value in chosen.items()}
            engine = {name: settings[name] for name in ENGINE_AXES if name in settings}
            own = {name: settings[name] for name in ("model", "gpu", "scheduling") if name in settings}
            workload = workloads.get(chosen["workloads"]) if "workloads" in chosen else None
            named = chosen.get("vllm_releases")
            if named is None and workload is not None:
                named = workload.workload.engine.vllm_version
            configuration = Configuration(release=release_named(named or DEFAULT_RELEASE.version),
                                          args=EngineArgs(**engine), **own)
            if workload is not None:
                configuration = configuration.with_workload_settings(workload.workload)
            cells.append(Cell(index, _cell_id(configuration, workload, self.commands, self.simulate), configuration,
                              workload, self.commands, self.simulate))
        return cells


# the engine axes a cell's id and its row hold at the release's default when not an axis; every other one is
# held as given (None: not an axis, vLLM derives it). Historical: the ids of done cells were hashed so.
RESOLVED = ("tensor_parallel_size", "pipeline_parallel_size", "kv_cache_dtype", "dtype")
# and the id's engine arguments beside the axes, at their defaults
ID_RESOLVED = (*RESOLVED, "trust_remote_code")


def _id_given(args: EngineArgs) -> dict[str, Any]:
    """The engine axes a cell's id holds as given: the historical ones always (None included), an axis
    added since only where set, so that the cells of a grid that does not sweep it keep their ids."""
    return {name: getattr(args, name) for name in ENGINE_AXES
            if name not in RESOLVED and (name in HISTORICAL_ENGINE_AXES or getattr(args, name) is not None)}


def _cell_id(configuration: Configuration, workload: GridWorkload | None, commands: tuple[str, ...],
             simulate: GridSimulateTable) -> str:
    # the document the ids of cells were hashed from before Configuration held its engine arguments in
    # one EngineArgs, so that a resumed sweep keeps its done cells
    inputs = {"model": configuration.model, "release": configuration.release.version, "gpu": configuration.gpu,
              **{name: configuration.value(name) for name in ID_RESOLVED},
              **_id_given(configuration.args),
              "scheduling": configuration.scheduling, "step_time": configuration.step_time}
    document = {"configuration": inputs, "workload": None if workload is None else [workload.given, workload.sha256],
                "commands": list(commands),
                "simulate": None if "simulate" not in commands else [simulate.find_max_rate, simulate.seed,
                                                                     simulate.step_time_ms]}
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]


def load_grid(path: Path) -> Grid:
    """Read a grid (a regular file, TOML), check it against `GRID` (types and ranges, before any
    value is used), then read its workloads and build its cells."""
    shown = path.name
    # a file that cannot be read is named as given: its name alone would hide a folder ("[/].toml")
    document = parse_toml(read_input_text(path, str(path)), shown)
    check_document(GRID, document, shown)
    try:
        return parse_grid(document, path)
    except FieldError as error:
        raise KvplanError(f"{shown}: {error}") from None


def _model_beside(model: str, folder: Path, where: str) -> str:
    """A model directory or config.json path is relative to the grid file (docs/sweep.md), as a
    workload's engine.model is to the workload; a hub id stays as written."""
    try:
        return model_named_in_file(model, folder)
    except KvplanError as error:
        raise FieldError(where, str(error)) from None


def parse_grid(document: dict[str, Any], path: Path) -> Grid:
    reject_unknown(document, "", TOP_KEYS)
    raw_commands = as_list(document.get("commands", ["plan"]), "commands")
    commands = []
    for i, item in enumerate(raw_commands):
        command = as_str(item, child("commands", i))
        if command not in COMMANDS:
            raise FieldError(child("commands", i), f"one of {', '.join(COMMANDS)}, got {command!r}")
        if command in commands:
            raise FieldError(child("commands", i), f"{command} is given twice")
        commands.append(command)
    axes_doc = as_object(document.get("axes"), "axes")
    reject_unknown(axes_doc, "axes", AXES)
    axes = []
    for name, (_, read) in AXES.items():
        if name not in axes_doc:
            continue
        where = child("axes", name)
        values = []
        for i, raw in enumerate(as_list(axes_doc[name], where)):
            value = read(raw, child(where, i))
            if name == "models":
                value = _model_beside(value, path.parent, child(where, i))
            if value in values:
                raise FieldError(child(where, i), f"{value!r} is given twice")
            values.append(value)
        axes.append((name, tuple(values)))
    given = dict(axes)
    if "models" not in given:
        raise FieldError("axes.models", "required: the models to try")
    if "gpu_memory_utilization" in given and "kv_cache_memory" in given:
        raise FieldError("axes.kv_cache_memory", "fixes the KV memory, so gpu_memory_utilization would have no "
                                                 "effect: give one of them")
    if "gpus" not in given and "kv_cache_memory" not in given:
        raise FieldError("axes", "give gpus or kv_cache_memory: a plan needs the GPU or the KV memory")
    if ("simulate" in commands) != ("workloads" in given):
        raise FieldError("axes.workloads", "required by the simulate command" if "simulate" in commands
                         else "given, but simulate is not among the commands")
    simulate_doc = as_object(document.get("simulate", {}), "simulate")
    reject_unknown(simulate_doc, "simulate", SIMULATE_KEYS)
    simulate = GridSimulateTable(
        find_max_rate=as_bool(simulate_doc.get("find_max_rate", False), "simulate.find_max_rate"),
        seed=None if "seed" not in simulate_doc else as_int(simulate_doc["seed"], "simulate.seed", minimum=0),
        step_time_ms=None if "step_time_ms" not in simulate_doc else as_number(
            simulate_doc["step_time_ms"], "simulate.step_time_ms", positive=True),
    )
    workloads = []
    for given_path in given.get("workloads", ()):
        file = path.parent / given_path
        try:
            data = read_input_bytes(file, given_path)
        except KvplanError as error:     # named with the grid's file, as every other mistake
            raise FieldError("axes.workloads", str(error)) from None
        workloads.append(GridWorkload(given_path, hashlib.sha256(data).hexdigest(), load_workload(file)))
    models = tuple(p for p in (local_model_path(model) for model in given["models"]) if p is not None)
    grid = Grid(path.name, tuple(commands), tuple(axes), tuple(workloads), simulate,
                (path, *models, *(p for w in workloads for p in w.workload.inputs)))
    if grid.size > MAX_CELLS:
        raise FieldError("axes", f"{grid.size:,} cells; kvplan sweeps at most {MAX_CELLS:,} at once")
    return grid
