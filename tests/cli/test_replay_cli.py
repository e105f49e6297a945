"""`kvplan replay` end to end: output modes, -o, exit codes, and no torch on the replay path."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.cli import run_app
from kvplan.sources.installed import default_release
from tests.golden import GOLDEN_CASES, GoldenCase


def kvplan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        run_app(list(args))
    captured = capsys.readouterr()
    return exit_info.value.code or 0, captured.out, captured.err


def replayed_golden(capsys: pytest.CaptureFixture[str], case: GoldenCase) -> dict:
    """Replay a golden trace piped with --dump-free-queue in the case's release and mode, check
    every step record against vLLM's (all but `usage`), and return the summary."""
    code, out, err = kvplan(capsys, "replay", str(case.trace), "--dump-free-queue",
                            "--vllm-version", case.vllm_version, "--scheduling", case.scheduling)
    assert code == 0 and err == ""
    golden = case.path.read_text().splitlines()
    lines = out.splitlines()
    assert len(lines) == len(golden)
    for mine, theirs in zip(lines[:-1], golden[:-1], strict=True):
        mine_record, golden_record = json.loads(mine), json.loads(theirs)
        mine_record.pop("usage"), golden_record.pop("usage")
        assert mine_record == golden_record
    return json.loads(lines[-1])["summary"]


PUBLIC_501 = [case for case in GOLDEN_CASES if case.name == "public-501"]


@pytest.mark.parametrize("case", PUBLIC_501, ids=[case.id for case in PUBLIC_501])
def test_piped_output_is_the_golden_json_lines(capsys, case: GoldenCase) -> None:
    summary = replayed_golden(capsys, case)
    golden_summary = case.records()[-1]["summary"]
    assert summary["schema_version"] == 1 and summary["num_steps"] == golden_summary["num_steps"]
    assert summary["config"]["num_gpu_blocks"] == 48
    assert (summary["vllm_semantics"], summary["scheduling"]) == (case.vllm_version, case.scheduling)


HYBRID_703 = [case for case in GOLDEN_CASES if case.name == "hybrid-703"]


@pytest.mark.parametrize("case", HYBRID_703, ids=[case.id for case in HYBRID_703])
def test_a_hybrid_trace_prints_every_groups_tables(capsys, case: GoldenCase) -> None:
    config = replayed_golden(capsys, case)["config"]
    assert config["kv_cache_group_specs"] == [{"spec": "FullAttentionSpec", "block_size": 16},
                                              *[{"spec": "MambaSpec", "block_size": 1024}] * 3]
    assert config["mamba_cache_mode"] == "none"


def test_the_default_is_what_vllm_serve_does(capsys, traces_dir: Path) -> None:
    code, out, _ = kvplan(capsys, "replay", str(traces_dir / "example.json"), "--summary-only")
    default = json.loads(out)["summary"]
    assert code == 0 and (default["vllm_semantics"], default["scheduling"]) == (default_release().version, "async")
    code, out, _ = kvplan(capsys, "replay", str(traces_dir / "example.json"), "--summary-only",
                          "--vllm-version", "0.17.1")
    summary = json.loads(out)["summary"]
    assert (summary["vllm_semantics"], summary["scheduling"]) == ("0.17.1", "async")
    assert summary["num_steps"] == 33 and summary["prefix_cache_queries"] == 682  # the 0.17.1 async records'
    code, out, _ = kvplan(capsys, "replay", str(traces_dir / "example.json"), "--summary-only",
                          "--vllm-version", "0.33.0")
    summary = json.loads(out)["summary"]
    assert (summary["vllm_semantics"], summary["scheduling"]) == ("0.33.0", "async")
    assert summary["num_steps"] == 33 and summary["prefix_cache_queries"] == 442  # the 0.33.0 async records'
    assert default == (summary if default_release().version == "0.33.0" else default)


def test_the_trace_may_name_its_release_and_mode(capsys, tmp_path: Path, traces_dir: Path) -> None:
    document = json.loads((traces_dir / "example.json").read_text())
    document["config"].update(vllm_version="0.17.1", scheduling="sync")
    trace = tmp_path / "named.json"
    trace.write_text(json.dumps(document))
    code, out, _ = kvplan(capsys, "replay", str(trace), "--summary-only")
    assert code == 0 and json.loads(out)["summary"]["num_steps"] == 32
    code, out, _ = kvplan(capsys, "replay", str(trace), "--summary-only", "--scheduling", "async")
    assert code == 0 and json.loads(out)["summary"]["scheduling"] == "async"  # the command line wins


def test_output_file_holds_exactly_what_would_be_printed(capsys, traces_dir: Path, tmp_path: Path) -> None:
    trace = str(traces_dir / "example.json")
    for extra in ([], ["--summary-only"]):
        _, printed, _ = kvplan(capsys, "replay", trace, *extra)
        target = tmp_path / "out.jsonl"
        code, out, err = kvplan(capsys, "replay", trace, *extra, "-o", str(target))
        assert code == 0 and out == "" and "wrote" in err
        assert target.read_text() == printed
    assert len(printed.splitlines()) == 1 and printed.startswith('{"summary"')


def test_output_never_overwrites_the_trace(capsys, traces_dir: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    original = (traces_dir / "example.json").read_text()
    trace.write_text(original)
    for target in (str(trace), str(tmp_path / "." / "trace.json")):
        code, out, err = kvplan(capsys, "replay", str(trace), "-o", target)
        assert code == 2 and out == "" and err.count("\n") == 1
        assert "this command reads that file" in err or "which this command reads" in err
    assert trace.read_text() == original


def test_options_override_the_trace_config(capsys, traces_dir: Path) -> None:
    code, out, _ = kvplan(capsys, "replay", str(traces_dir / "example.json"), "--summary-only",
                          "--num-gpu-blocks", "40", "--no-enable-prefix-caching", "--max-num-seqs", "2")
    summary = json.loads(out)["summary"]
    assert code == 0 and summary["total_preemptions"] == 0 and summary["prefix_cache_queries"] == 0
    assert summary["config"]["num_gpu_blocks"] == 40 and summary["config"]["max_num_seqs"] == 2


@pytest.mark.parametrize(("args", "message"), [
    (["--max-num-seqs", "4096"], "max_num_seqs"),
    (["--no-enable-chunked-prefill"], "chunked prefill off"),
    (["--prefix-caching", "maybe"], "--prefix-caching takes on or off"),
    (["--block-size", "12"], "--block-size: 12 is not a block size vLLM accepts"),
    (["--vllm-version", "0.20.0"], "--vllm-version: expected one of: 0.17.1, 0.33.0, 0.34.0, got '0.20.0'"),
    (["--scheduling", "eager"], "--scheduling: expected one of: sync, async, got 'eager'"),
])
def test_bad_options_exit_2_with_one_line(capsys, traces_dir: Path, args: list[str], message: str) -> None:
    code, out, err = kvplan(capsys, "replay", str(traces_dir / "example.json"), *args)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


@pytest.mark.parametrize(("content", "message"), [
    ("not json at all", "not valid JSON"),
    ('{"config": {"num_gpu_blocks": 8}, "requests": [{"request_id": "a", "unique_len": 4, "max_tokens": 1,'
     ' "arival_step": 0}]}', "arival_step: unknown key; did you mean arrival_step?"),
    ('{"config": {}, "requests": []}', "needs num_gpu_blocks"),
    ('{"config": {"num_gpu_blocks": 8, "kv_cache_groups": [{"type": "sliding_window"}]}, "requests": []}',
     "config.kv_cache_groups[0].sliding_window: required key is missing"),
    ('{"config": {"num_gpu_blocks": 8, "kv_cache_groups": [{"type": "full_attention"}, {"type": "mamba"}],'
     ' "enable_chunked_prefill": false, "max_num_batched_tokens": 4096}, "requests": []}',
     "requires chunked prefill"),
    ('{"config": {"num_gpu_blocks": 8, "vllm_version": "0.9.2"}, "requests": []}',
     "config.vllm_version: expected one of: 0.17.1, 0.33.0, 0.34.0, got '0.9.2'"),
    ('{"config": {"num_gpu_blocks": 8, "vllm_version": "0.33.0", "kv_cache_groups": [{"type": "full_attention"},'
     ' {"type": "sliding_window", "sliding_window": 64, "block_size": 32}]}, "requests": []}',
     "KV cache groups with their own block sizes (16, 32) are not reproduced for vLLM 0.33.0"),
])
def test_bad_traces_exit_2_with_one_line(capsys, tmp_path: Path, content: str, message: str) -> None:
    trace = tmp_path / "bad.json"
    trace.write_text(content)
    code, out, err = kvplan(capsys, "replay", str(trace))
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


def test_a_stall_exits_3_after_the_summary(capsys, tmp_path: Path) -> None:
    trace = tmp_path / "stall.json"
    # 2 usable blocks of 16 tokens cannot hold a 100-token prompt (block size given: any release)
    trace.write_text(json.dumps({"config": {"num_gpu_blocks": 3, "block_size": 16}, "requests": [
        {"request_id": "long", "unique_len": 100, "max_tokens": 2}]}))
    code, out, err = kvplan(capsys, "replay", str(trace), "--summary-only")
    assert code == 3 and "stalled" in err
    summary = json.loads(out)["summary"]
    assert summary["stalled"] is True and summary["requests"]["long"]["finish_step"] is None


SYNC_0_17_1 = ("--vllm-version", "0.17.1", "--scheduling", "sync")


@pytest.mark.parametrize(("name", "flags", "facts"), [
    ("example", SYNC_0_17_1, ("0.17.1 semantics, sync scheduling", "steps", "32", "preemptions", "hit rate", "35.3%",
                              "peak blocks", "13 / 13")),
    ("example", ("--vllm-version", "0.17.1"), ("0.17.1 semantics, async scheduling", "steps", "33", "hit rate",
                                              "35.2%")),
    ("example", ("--vllm-version", "0.33.0"), ("0.33.0 semantics, async scheduling", "steps", "33", "hit rate",
                                              "36.2%")),
    ("hybrid-606", SYNC_0_17_1, ("steps", "107", "KV cache groups", "full attention, mamba all")),
    ("hybrid-606", ("--vllm-version", "0.17.1"), ("0.17.1 semantics, async scheduling", "steps", "117")),
    # 0.33.0 has no Mamba "all": the model's groups run "align"
    ("hybrid-606", ("--vllm-version", "0.33.0"), ("0.33.0 semantics, async scheduling", "steps", "134",
                                                  "full attention, mamba align")),
])
def test_a_terminal_gets_a_summary_not_records(traces_dir: Path, name: str, flags: tuple[str, ...],
                                               facts: tuple[str, ...]) -> None:
    controller, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "kvplan", "replay", str(traces_dir / f"{name}.json"), *flags],
                               stdout=terminal, stderr=terminal, env={**os.environ, "COLUMNS": "100"})
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert process.wait(timeout=30) == 0
    shown = b"".join(chunks).decode()
    for fact in facts:
        assert fact in shown
    assert '"step"' not in shown


def test_the_replay_path_never_imports_torch_or_transformers(traces_dir: Path) -> None:
    code = (
        "import contextlib, io, json, sys\n"
        "from kvplan.cli import run_app\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        run_app(['replay', {str(traces_dir / 'example.json')!r}])\n"
        "    except SystemExit as done:\n"
        "        assert not done.code, done.code\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == []


def test_the_vllm_spellings_and_the_old_ones_set_the_same_settings(capsys, traces_dir: Path) -> None:
    trace = str(traces_dir / "example.json")
    outputs = []
    for flags in (["--no-enable-prefix-caching", "--no-enable-chunked-prefill"],
                  ["--prefix-caching", "off", "--no-chunked-prefill"]):
        code, out, _ = kvplan(capsys, "replay", trace, "--summary-only", "--max-num-batched-tokens", "512", *flags)
        assert code == 0
        outputs.append(json.loads(out)["summary"]["config"])
    assert outputs[0] == outputs[1]
    assert not outputs[0]["enable_prefix_caching"] and not outputs[0]["enable_chunked_prefill"]
    code, _, err = kvplan(capsys, "replay", trace, "--enable-prefix-caching", "--prefix-caching", "off")
    assert code == 2 and "disagree" in err
