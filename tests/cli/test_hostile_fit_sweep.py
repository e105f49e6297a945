"""The edge contract of issue 25, as a property over `fit` and `sweep`: whatever arguments, grid,
resumed table and journal a hostile or careless user gives (bad values in every list and axis,
outputs aimed at inputs, at a FIFO or a directory, links, damaged or foreign resume files), kvplan
exits 0, 1, 2 or 3, prints no traceback, leaves stdout empty or one JSON document with --json,
changes no input and no FIFO, and ends within a bounded time.

The commands run in-process with `--workers 1` (no worker processes), so that an example costs
about a second; the number of examples is small for `make test` (HOSTILE_EXAMPLES raises it)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli.test_hostile_inputs import assert_contract
from tests.edge import offline_home
from tests.usecases.simulate.factories import mix

EXAMPLES = settings(max_examples=int(os.environ.get("HOSTILE_EXAMPLES", "8")), deadline=None,
                    derandomize=not os.environ.get("HOSTILE_EXAMPLES"),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
REPO = Path(__file__).resolve().parents[2]
QWEN_CONFIG = REPO / "kvplan" / "data" / "models" / "Qwen--Qwen2-0.5B-Instruct" / "config.json"
# a hang guard, not a speed target: small inputs run in seconds, and a command that blocks on a
# FIFO or reads /dev/zero would never end
WALL_LIMIT_S = 180


@contextlib.contextmanager
def bounded_time(seconds: int) -> Iterator[None]:
    def ran_past(_signum: int, _frame: object) -> None:
        raise AssertionError(f"the command ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, ran_past)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def user_folder() -> Iterator[Path]:
    """A grid, a workload, a model directory and a FIFO, as a user's folder holds them."""
    with offline_home(), tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "w.json").write_text(json.dumps(mix(arrival={"process": "poisson", "rate": 20.0, "count": 6})))
        (folder / "m").mkdir()
        (folder / "m" / "config.json").write_bytes(QWEN_CONFIG.read_bytes())
        os.mkfifo(folder / "fifo")
        (folder / "dir").mkdir()
        yield folder


def run_checked(argv: list[str], folder: Path, own: tuple[Path, ...] = ()) -> None:
    """The contract (`assert_contract`) within the wall-time bound; `own` are the files the command
    may change: its results table (resumed, then rewritten whole) and its journal (consumed)."""
    with bounded_time(WALL_LIMIT_S):
        assert_contract(argv, folder, ignore=tuple(str(path) for path in own))
    assert stat.S_ISFIFO(os.lstat(folder / "fifo").st_mode), "the FIFO was replaced"


def in_folder(folder: Path, value: str) -> str:
    """A file name of the strategies, as a path in the user's folder."""
    return str(folder / value[1:]) if value.startswith("@") else value


# ---------------------------------------------------------------------------- fit

FIT_OPTIONS = {
    "--model": ["@m", "Qwen/Qwen2-0.5B-Instruct", "nobody/none-xyz", "[/]", "", "a\x1bb", "@m/config.json"],
    "--gpus": ["l4-24gb", "tpu", "l4-24gb,l4-24gb", "", "l4-24gb,,"],
    "--kv-cache-memory": ["2GiB", "0", "1e400", "1GiB,1GiB", "", "4PiB", "1GiB,2GiB"],
    "--kv-cache-dtype": ["auto", "bogus", "auto,fp8", "int8", ""],
    "--dtype": ["auto", "bogus", "float16"],
    "--max-num-seqs": ["8", "0", "1,1", "nan", "8,16", "99999999999999"],
    "--max-model-len": ["2048", "1", "nan"],
    "--concurrency": ["4@1024", "0@1", "x", "4@99999999999"],
    "--workload": ["@w.json", "@m/config.json", "@fifo", "@dir", "@nope.json"],
    "--report": ["@r.html", "@w.json", "@fifo", "@m/config.json", "@dir", "/proc/version", "@" + "a" * 300],
    "--max-configurations": ["1", "0", "10"],
    "--max-requests": ["1", "100"],
    "--rate": ["5/s", "nan", "0"],
    "--slo": ["ttft_p95=500ms", "bogus=1"],
    "--vllm-version": ["0.17.1", "0.2"],
}


@EXAMPLES
@given(options=st.lists(st.sampled_from(sorted(FIT_OPTIONS)).flatmap(
    lambda flag: st.tuples(st.just(flag), st.sampled_from(FIT_OPTIONS[flag]))), max_size=4, unique_by=lambda o: o[0]),
    json_output=st.booleans(), offline=st.booleans())
def test_hostile_fit_arguments(options: list[tuple[str, str]], json_output: bool, offline: bool) -> None:
    given_flags = dict(options)
    base = {"--model": "@m", "--gpus": "l4-24gb", "--kv-cache-memory": "2GiB", "--concurrency": "4@1024"}
    with user_folder() as folder:
        argv = ["fit", "--workers", "1"]
        for flag, value in {**base, **given_flags}.items():
            argv += [flag, in_folder(folder, value)]
        run_checked([*argv, *(["--json"] if json_output else []), *(["--offline"] if offline else [])], folder)


# ---------------------------------------------------------------------------- sweep

AXES: dict[str, list[Any]] = {
    "models": [["Qwen/Qwen2-0.5B-Instruct"], ["m"], ["[bold]"], ["nobody/none-xyz"], [5], ["../m"], []],
    "kv_cache_memory": [["1GiB"], ["0"], ["-1"], ["1GiB", "1GiB"], [1e300], ["2GiB"]],
    "kv_cache_dtype": [["auto"], ["bogus"], ["int8"], ["auto", "fp8"]],
    "dtype": [["auto"], ["bogus"]],
    "gpus": [["l4-24gb"], ["tpu"]],
    "max_num_seqs": [[8], [0], [2**62]],
    "tensor_parallel_size": [[1], [3], [0]],
    "vllm_releases": [["0.17.1"], ["0.2"]],
    "workloads": [["w.json"], ["nope.json"], ["fifo"], ["dir"]],
}
RESUME = [None, "", "5\n", "null\n", "{}\n", "[" * 50_000 + "]" * 50_000 + "\n", "\udcff\n", '{"cell_id": NaN}\n',
          "x" * 200_000 + "\n", "@link:grid.toml", "@link:/dev/zero", "@fifo", "@dir", "@row", "@nan-row",
          "@foreign-row"]
OUTPUTS = ["r.jsonl", "r.csv", "grid.toml", "w.json", "fifo", "dir", "m/config.json", "r.txt", "a" * 250 + ".csv"]
ROW_LINE: dict[str, str] = {}


def _row_line() -> str:
    """One row of a real sweep, as its .jsonl holds it (made once)."""
    if not ROW_LINE:
        from tests.edge import run_cli

        with user_folder() as folder:
            (folder / "g.toml").write_text('[axes]\nmodels = ["Qwen/Qwen2-0.5B-Instruct"]\n'
                                           'kv_cache_memory = ["1GiB"]\n')
            code, _, err = run_cli(["sweep", str(folder / "g.toml"), "-o", str(folder / "t.jsonl"), "--workers", "1"])
            assert code == 0, err
            ROW_LINE["row"] = (folder / "t.jsonl").read_text().splitlines()[0]
    return ROW_LINE["row"]


def _place(path: Path, content: str | None, folder: Path) -> None:
    """A resume file (a table or a journal) at `path`: text, a link, the FIFO, a directory, a row."""
    if content is None or path.exists() or os.path.islink(path):
        return
    if content.startswith("@link:"):
        target = content[len("@link:"):]
        os.symlink(target if target.startswith("/") else folder / target, path)
    elif content == "@fifo":
        os.mkfifo(path)
    elif content == "@dir":
        path.mkdir()
    elif content.startswith("@"):
        row = json.loads(_row_line())
        if content == "@nan-row":
            row["plan_max_concurrency"] = float("nan")
        if content == "@foreign-row":
            row["cell_id"] = "0" * 16
        path.write_text(json.dumps(row) + "\n")
    else:
        path.write_text(content, encoding="utf-8", errors="surrogateescape")


def _toml_value(values: list[Any]) -> str:
    return "[" + ", ".join(json.dumps(value) if not isinstance(value, float) else repr(value) for value in values) + "]"


@EXAMPLES
@given(axes=st.lists(st.sampled_from(sorted(AXES)).flatmap(
    lambda axis: st.tuples(st.just(axis), st.sampled_from(AXES[axis]))), max_size=3, unique_by=lambda a: a[0]),
    simulate=st.booleans(), output=st.sampled_from(OUTPUTS), table=st.sampled_from(RESUME),
    journal=st.sampled_from(RESUME), flags=st.lists(st.sampled_from(["--json", "--retry-failed", "--offline"]),
                                                    unique=True))
def test_hostile_sweeps(axes: list[tuple[str, list[Any]]], simulate: bool, output: str, table: str | None,
                        journal: str | None, flags: list[str]) -> None:
    chosen = {"models": ["Qwen/Qwen2-0.5B-Instruct"], "kv_cache_memory": ["1GiB"], **dict(axes)}
    if simulate:
        chosen.setdefault("workloads", ["w.json"])
    with user_folder() as folder:
        lines = ['commands = ["plan", "simulate"]'] if "workloads" in chosen else []
        lines += ["[axes]", *(f"{axis} = {_toml_value(values)}" for axis, values in chosen.items())]
        (folder / "grid.toml").write_text("\n".join(lines) + "\n")
        if output in ("r.jsonl", "r.csv"):
            _place(folder / output, table, folder)
            _place(folder / f".{output}.journal.jsonl", journal, folder)
        own = (folder / output, folder / f".{output}.journal.jsonl") if output in ("r.jsonl", "r.csv") else ()
        run_checked(["sweep", str(folder / "grid.toml"), "-o", str(folder / output), "--workers", "1", *flags],
                    folder, own)
