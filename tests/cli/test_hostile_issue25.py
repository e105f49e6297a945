"""Issue 25's defects on fit, sweep, resume files, releases and reports, one test each as the issue
found them (numbered as there): every one is now exit 2 with one line (or the right answer), and
no input, device node or other file the user holds is changed. The commands run in-process
(`tests.edge.run_cli`), except where a defect would block the test itself (a FIFO), which runs
in its own process under a timeout."""

from __future__ import annotations

import dataclasses
import errno
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.files import atomic_output
from kvplan.report import sweep_table
from tests.edge import offline_home, run_cli, snapshot
from tests.usecases.simulate.factories import mix

REPO = Path(__file__).resolve().parents[2]
QWEN_CONFIG = REPO / "kvplan" / "data" / "models" / "Qwen--Qwen2-0.5B-Instruct" / "config.json"
GRID = '[axes]\nmodels = ["Qwen/Qwen2-0.5B-Instruct"]\nkv_cache_memory = ["1GiB", "2GiB"]\n'
FIT = ["fit", "--concurrency", "4@1024", "--gpus", "l4-24gb", "--kv-cache-memory", "2GiB", "--workers", "1"]


@pytest.fixture(autouse=True)
def offline():
    with offline_home():
        yield


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh directory, as a new user's: a small grid, a small workload, a model directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "grid.toml").write_text(GRID)
    (tmp_path / "w.json").write_text(json.dumps(mix()))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_bytes(QWEN_CONFIG.read_bytes())
    return tmp_path


def refused(argv: list[str], says: str, folder: Path | None = None) -> str:
    """Exit 2, one line on stderr naming the problem, nothing on stdout, no file changed."""
    before = snapshot(folder) if folder is not None else None
    code, out, err = run_cli(argv)
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and err.startswith("kvplan: error: ") and says in err, err
    if folder is not None:
        after = snapshot(folder)
        assert {path: data for path, data in after.items() if path in before} == before, "an input changed"
    return err


def in_process(*argv: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    code = "import sys\nfrom kvplan.cli import run_app\nrun_app(sys.argv[1:])\n"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"})


# ---------------------------------------------------------------------------- 1-3: inputs changed or destroyed

@pytest.mark.parametrize("link", [os.symlink, os.link])
def test_1_a_journal_linked_to_the_grid_is_refused(folder, link):
    link("grid.toml", ".r.csv.journal.jsonl")
    refused(["sweep", "grid.toml", "-o", "r.csv"], "the journal of -o .r.csv.journal.jsonl: that is the same file as "
            "grid.toml, which this command reads", folder)
    assert (folder / "grid.toml").read_text() == GRID and not (folder / "r.csv").exists()


def test_1_a_journal_linked_elsewhere_is_refused_too(folder):
    (folder / "notes.txt").write_text("mine")
    os.symlink("notes.txt", ".r.csv.journal.jsonl")
    refused(["sweep", "grid.toml", "-o", "r.csv"], "is a symbolic link, not the journal kvplan writes", folder)
    assert (folder / "notes.txt").read_text() == "mine"


def test_2_a_report_inside_the_model_directory_is_refused(folder):
    refused([*FIT, "--model", "m", "--report", "m/config.json"],
            "--report m/config.json: that is a file in m, which this command reads", folder)


def _device_or_fifo(path: Path) -> None:
    try:
        os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 7))     # /dev/full's numbers
    except PermissionError:
        os.mkfifo(path)


@pytest.mark.parametrize("flag", ["--report", "-o", "--timeline"])
def test_3_a_device_node_as_output_is_refused_and_kept(folder, flag):
    _device_or_fifo(folder / "node")
    kind = stat.S_IFMT(os.lstat(folder / "node").st_mode)
    refused(["simulate", "w.json", flag, "node"], f"{flag} node: is a device, a FIFO or a socket", folder)
    assert stat.S_IFMT(os.lstat(folder / "node").st_mode) == kind       # not replaced by a regular file


def test_3_a_link_to_a_device_is_refused(folder):
    os.symlink("/dev/full", "full.html")
    refused(["simulate", "w.json", "--report", "full.html"], "is a device, a FIFO or a socket", folder)
    assert os.path.islink(folder / "full.html")


# ---------------------------------------------------------------------------- 4-6: hangs and memory

@pytest.mark.parametrize("fifo", ["r.csv", ".r.csv.journal.jsonl"])
def test_4_a_fifo_output_or_journal_never_blocks(folder, fifo):
    os.mkfifo(folder / fifo)
    result = in_process("sweep", "grid.toml", "-o", "r.csv", cwd=folder, timeout=120)
    assert result.returncode == 2 and "is a device, a FIFO or a socket" in result.stderr, result.stderr
    assert stat.S_ISFIFO(os.lstat(folder / fifo).st_mode)


@pytest.mark.parametrize("name", ["r.jsonl", ".r.jsonl.journal.jsonl"])
def test_5_a_link_to_dev_zero_is_refused_before_reading(folder, name):
    os.symlink("/dev/zero", name)
    refused(["sweep", "grid.toml", "-o", "r.jsonl"], "is a device, a FIFO or a socket", folder)


def test_5_resume_files_are_read_only_up_to_a_bound_of_the_grid(folder):
    limit = sweep_table.resume_limit(2)
    assert limit < 1 << 30          # a two-cell grid reads its resume files to some hundred MiB, not 2 GiB
    with open(folder / ".r.jsonl.journal.jsonl", "wb") as sparse:
        sparse.truncate(limit + 1)
    refused(["sweep", "grid.toml", "-o", "r.jsonl"], f"{limit + 1:,} bytes, more than the", folder)


def test_6_a_fit_search_past_the_cap_is_refused_up_front(folder):
    seqs = ",".join(str(n) for n in range(1, 3001))
    tokens = ",".join(str(n) for n in range(2048, 5049))
    err = refused([*FIT, "--model", "m", "--max-num-seqs", seqs, "--max-num-batched-tokens", tokens],
                  "the search holds 18,006,000 configurations")
    assert "give shorter lists, or --max-configurations N" in err
    refused([*FIT, "--model", "m", "--max-num-seqs", ",".join(str(n) for n in range(1, 20_001))],
            "--max-num-seqs: 20,000 values; kvplan fit takes at most 10,000 per list")


def test_6_the_cap_is_lifted_with_its_flag(folder):
    narrow = [*FIT, "--model", "m", "--max-num-seqs", "8,16", "--json"]
    refused([*narrow, "--max-configurations", "3"], "the search holds 4 configurations")
    code, out, err = run_cli([*narrow, "--max-configurations", "4"])
    assert code in (0, 1) and json.loads(out)["schema_version"], err


def test_6_a_workload_past_the_request_cap_is_refused_up_front(folder):
    (folder / "big.json").write_text(json.dumps(mix(arrival={"process": "poisson", "rate": 5, "count": 10**7})))
    refused(["fit", "-w", "big.json", "--model", "m", "--gpus", "l4-24gb", "--kv-cache-memory", "2GiB"],
            "big.json: about 10,000,000 requests per run", folder)


# ---------------------------------------------------------------------------- 7-8: tracebacks

@pytest.mark.parametrize(("line", "says"), [
    (b"5\n", "row 1 is 5, not a row object"),
    (b"null\n", "row 1 is null, not a row object"),
    (b'{"cell_id": "x"}\n', "not a journal of this kvplan's sweep"),
    (b"\xff\xfe{}\n", "not UTF-8 text"),
    (b"[" * 100_000 + b"]" * 100_000 + b"\n", "nests too deeply"),
    (b"{nope\n{}\n", "line 1 is not JSON"),
])
def test_7_a_damaged_journal_is_one_line(folder, line, says):
    (folder / ".r.csv.journal.jsonl").write_bytes(line)
    refused(["sweep", "grid.toml", "-o", "r.csv", "--json"], says, folder)


def test_7_a_directory_as_journal_is_one_line(folder):
    (folder / ".r.csv.journal.jsonl").mkdir()
    refused(["sweep", "grid.toml", "-o", "r.csv", "--json"], "the journal of -o .r.csv.journal.jsonl: is a directory")


def test_7_the_line_an_interrupted_sweep_was_writing_is_skipped(folder):
    assert run_cli(["sweep", "grid.toml", "-o", "r.jsonl", "--workers", "1"])[0] == 0
    first = (folder / "r.jsonl").read_text().splitlines()[0]
    (folder / "r.jsonl").unlink()
    (folder / ".r.jsonl.journal.jsonl").write_text(first + "\n" + first[:40])       # cut, no newline after it
    code, _, err = run_cli(["sweep", "grid.toml", "-o", "r.jsonl", "--workers", "1"])
    assert code == 0 and "1 of 2 cells already done" in err, err


def test_7_a_csv_field_over_128_kib_is_one_line(folder):
    assert run_cli(["sweep", "grid.toml", "-o", "r.csv", "--workers", "1"])[0] == 0
    text = (folder / "r.csv").read_text().splitlines()
    (folder / "r.csv").write_text("\n".join([text[0], text[1].replace(",ok,,", ",error," + "x" * 200_000 + ",", 1),
                                             *text[2:]]) + "\n")
    refused(["sweep", "grid.toml", "-o", "r.csv", "--json"], "not CSV as kvplan's sweep writes it", folder)


@pytest.mark.parametrize("report", ["/proc/version", "/sys/kernel/x.html"])
def test_8_an_output_that_cannot_be_created_is_refused_before_the_work(folder, report):
    if not Path(report).parent.is_dir():
        pytest.skip(f"no {Path(report).parent} here")
    refused([*FIT, "--model", "m", "--report", report], f"--report {report}: no file can be created there")


def test_8_a_name_too_long_is_refused_before_the_work(folder):
    refused(["sweep", "grid.toml", "-o", "a" * 300 + ".csv"], "longer than the file system allows")
    refused(["sweep", "grid.toml", "-o", "a" * 250 + ".csv"], "longer than the file system allows")
    assert not (folder / ("a" * 250 + ".csv")).exists()


def test_8_a_write_that_fails_all_the_same_is_one_line(tmp_path, monkeypatch):
    def full(*_args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(KvplanError, match=r"cannot write .*out\.html \(No space left on device\)"), \
            atomic_output(tmp_path / "out.html") as stream:
        stream.write("x")
    assert list(tmp_path.iterdir()) == []          # the temporary file is gone too


# ---------------------------------------------------------------------------- 9-14: silent wrong answers

PROFILE = {"schema_version": 1, "kind": "kvplan.profile", "provenance": {"vllm_semantics": "0.17.1"}, "plan": {
    "model": "Qwen/Qwen2-0.5B-Instruct", "num_blocks": 300, "block_size": 16, "max_model_len": 2048,
    "max_num_batched_tokens": 1024, "max_num_seqs": 16, "enable_prefix_caching": True,
    "kv_bytes_per_token": 12288, "weights_bytes": 988065536, "gpu": None}}


@pytest.mark.parametrize(("engine", "flags"), [
    ({"vllm_version": "0.33.0"}, []), ({}, ["--vllm-version", "0.33.0"]),
    ({"vllm_version": "0.17.1"}, ["--vllm-version", "0.33.0"]),
])
def test_9_a_profile_of_another_release_is_refused_as_check_refuses_it(folder, engine, flags):
    (folder / "p.json").write_text(json.dumps(PROFILE))
    (folder / "pw.json").write_text(json.dumps(mix(engine={"profile": "p.json", **engine})))
    refused(["simulate", "pw.json", *flags], "engine.profile (p.json) does not match this run: it follows vLLM 0.17.1 "
            "semantics, this run follows 0.33.0: give --vllm-version 0.17.1", folder)
    code, _, err = run_cli(["simulate", "pw.json", "--vllm-version", "0.17.1"])
    assert code == 0, err


def test_9_no_release_at_all_is_the_default_release_and_refused_too(folder):
    (folder / "p.json").write_text(json.dumps(PROFILE))
    (folder / "pw.json").write_text(json.dumps(mix(engine={"profile": "p.json"})))
    refused(["simulate", "pw.json"], "it follows vLLM 0.17.1 semantics, this run follows", folder)


@pytest.mark.parametrize(("flags", "says"), [
    (["--kv-cache-dtype", "bogus"], "--kv-cache-dtype 'bogus' is not known"),
    (["--kv-cache-dtype", "auto,int8"], "--kv-cache-dtype 'int8' is not known"),
    (["--dtype", "bogus"], "Unknown dtype: 'bogus'"),
    (["--kv-cache-memory", "1GiB,1073741824"], "--kv-cache-memory: '1073741824' is given twice"),
])
def test_10_and_15_every_value_of_a_fit_list_is_checked_as_plan_checks_it(folder, flags, says):
    argv = [*FIT, "--model", "m", *flags]
    refused(argv[:6] + argv[8:] if "--kv-cache-memory" in flags else argv, says, folder)


@pytest.mark.parametrize(("axis", "says"), [
    ('kv_cache_dtype = ["auto", "bogus"]', "grid.toml: axes.kv_cache_dtype[1]: --kv-cache-dtype 'bogus' is not known"),
    ('dtype = ["bogus"]', "grid.toml: axes.dtype[0]: Unknown dtype: 'bogus'"),
])
def test_10_a_bad_sweep_axis_value_is_refused_before_any_cell_runs(folder, axis, says):
    (folder / "grid.toml").write_text(GRID + axis + "\n")
    refused(["sweep", "grid.toml", "-o", "r.csv"], says, folder)
    assert not (folder / "r.csv").exists() and not (folder / ".r.csv.journal.jsonl").exists()


@pytest.mark.parametrize("output", ["r.jsonl", "r.csv"])
def test_11_nan_in_a_resumed_table_is_refused_not_written_back(folder, output):
    assert run_cli(["sweep", "grid.toml", "-o", output, "--workers", "1"])[0] == 0
    table = folder / output
    if output.endswith(".jsonl"):
        rows = [json.loads(line) for line in table.read_text().splitlines()]
        rows[0]["plan_max_concurrency"] = float("nan")
        table.write_text("".join(json.dumps(row) + "\n" for row in rows))
        says = "line 1 holds NaN"
    else:
        lines = table.read_text().splitlines()
        header = lines[0].split(",")
        cells = lines[1].split(",")
        cells[header.index("plan_max_concurrency")] = "nan"
        table.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
        says = 'column plan_max_concurrency: "nan" is not a finite number'
    refused(["sweep", "grid.toml", "-o", output], says, folder)


def test_11_a_table_never_holds_a_bare_nan(tmp_path):
    assert run_cli(["sweep", str(_grid(tmp_path)), "-o", str(tmp_path / "r.jsonl"), "--workers", "1"])[0] == 0
    rows = sweep_table.read_table(tmp_path / "r.jsonl")
    rows[0] = {**rows[0], "plan_max_concurrency": float("inf"), "simulate_mean_kv_usage": float("nan")}
    sweep_table.write_table(tmp_path / "again.jsonl", rows)
    for line in (tmp_path / "again.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"a bare {name} in the table"))
    assert sweep_table.read_table(tmp_path / "again.jsonl")[0]["plan_max_concurrency"] is None


def _grid(folder: Path) -> Path:
    (folder / "grid.toml").write_text(GRID)
    return folder / "grid.toml"


def test_12_a_grid_model_directory_is_relative_to_the_grid_file(folder, tmp_path_factory, monkeypatch):
    sweeps = folder / "sweeps"
    (sweeps / "m_qwen").mkdir(parents=True)
    (sweeps / "m_qwen" / "config.json").write_bytes(QWEN_CONFIG.read_bytes())
    (sweeps / "grid.toml").write_text('[axes]\nmodels = ["m_qwen"]\nkv_cache_memory = ["1GiB"]\n')
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    monkeypatch.chdir(elsewhere)
    code, _, err = run_cli(["sweep", str(sweeps / "grid.toml"), "-o", "r.jsonl", "--workers", "1"])
    assert code == 0, err
    [row] = sweep_table.read_table(elsewhere / "r.jsonl")
    assert row["status"] == "ok" and row["model"] == str(sweeps / "m_qwen") and row["plan_fits"] is True


def test_12_an_output_in_a_grid_model_directory_is_refused(folder):
    (folder / "grid.toml").write_text('[axes]\nmodels = ["m"]\nkv_cache_memory = ["1GiB"]\n')
    (folder / "m" / "old.csv").write_text("")
    refused(["sweep", "grid.toml", "-o", "m/old.csv"], "-o m/old.csv: that is a file in m, which this command reads",
            folder)


def test_13_fit_and_sweep_take_offline(folder, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    refused([*FIT, "--model", "nobody/none-xyz", "--offline"], "and --offline is given")
    (folder / "grid.toml").write_text('[axes]\nmodels = ["nobody/none-xyz"]\nkv_cache_memory = ["1GiB"]\n')
    code, _, err = run_cli(["sweep", "grid.toml", "-o", "r.jsonl", "--offline", "--workers", "1"])
    assert code == 1, err
    [row] = sweep_table.read_table(folder / "r.jsonl")
    assert row["status"] == "error" and "--offline is given" in row["error"]


def test_13_offline_reaches_the_worker_processes(folder, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    (folder / "grid.toml").write_text('[axes]\nmodels = ["nobody/none-xyz"]\nkv_cache_memory = ["1GiB"]\n')
    code, _, err = run_cli(["sweep", "grid.toml", "-o", "r.jsonl", "--offline", "--workers", "2"])
    assert code == 1, err
    [row] = sweep_table.read_table(folder / "r.jsonl")
    assert "--offline is given" in row["error"]


HYBRID_TRACE = {
    "config": {"num_gpu_blocks": 14, "block_size": 16, "max_num_batched_tokens": 64, "max_num_seqs": 4,
               "max_model_len": 512, "kv_cache_groups": [{"type": "full_attention"},
                                                         {"type": "sliding_window", "sliding_window": 32}]},
    "requests": [
        {"request_id": "r0", "arrival_step": 0, "prefix_id": 0, "prefix_len": 48, "unique_len": 8, "max_tokens": 12},
        {"request_id": "r1", "arrival_step": 1, "prefix_id": 0, "prefix_len": 48, "unique_len": 4, "max_tokens": 6},
    ],
}


def test_14_simulate_takes_a_hybrid_trace_as_replay_runs_it(folder):
    (folder / "trace.json").write_text(json.dumps(HYBRID_TRACE))
    code, out, err = run_cli(["simulate", "trace.json", "--json", "--vllm-version", "0.33.0"])
    assert code == 0, err
    simulated = json.loads(out)
    assert [group["type"] for group in simulated["engine"]["kv_cache_groups"]] == ["full_attention", "sliding_window"]
    code, out, err = run_cli(["replay", "trace.json", "--summary-only", "--vllm-version", "0.33.0"])
    assert code == 0, err
    replayed = json.loads(out)["summary"]
    assert simulated["num_steps"] == replayed["num_steps"] and simulated["num_finished"] == replayed["num_finished"]


# ---------------------------------------------------------------------------- 15: lower

def test_15_control_characters_of_a_model_id_never_reach_the_terminal():
    from rich.console import Console

    from kvplan.report.fit_console import render_fit
    from tests.report.test_fit_reports import result

    shown = result()
    evil = "evil\x1b[31m\x07\r/model"
    rejected = dataclasses.replace(shown.rejected[0], detail=f"{evil} misses")
    shown = dataclasses.replace(shown, request=dataclasses.replace(shown.request, model=evil), rejected=(rejected,))
    stream = io.StringIO()
    render_fit(shown, Console(file=stream, width=200, color_system=None))
    text = stream.getvalue()
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert text.count("evil\\x1b[31m\\x07\\x0d/model") == 2


@pytest.mark.parametrize("name", ["[bold].toml", "[/].toml", "x[red]y.toml", "[/bold].toml"])
def test_15_a_grid_named_like_markup_is_named_as_written(folder, name):
    refused(["sweep", name, "-o", "r.csv"], f"kvplan: error: {name}: file not found")
    refused(["fit", "-w", name.replace(".toml", ".json"), "--gpus", "l4-24gb"],
            f"kvplan: error: {name.replace('.toml', '.json')}: file not found")
    if "/" not in name:
        (folder / name).write_text("axes = 5\n")
        refused(["sweep", name, "-o", "r.csv"], f"kvplan: error: {name}: axes")
