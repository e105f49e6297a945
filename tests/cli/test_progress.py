"""Long work says where it stands on stderr also when stderr is not a terminal: one line per phase,
and for counted work one line at each tenth."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import kvplan.cli.progress as progress_module
from kvplan.cli.progress import Reporter, reporting
from kvplan.measure.cpu_speed import forward_seconds
from tests.usecases.simulate.factories import mix


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvplan", *args], capture_output=True, text=True)


def test_counted_work_prints_a_line_at_each_tenth():
    stream = io.StringIO()
    reporter = Reporter(stream)
    reporter.stage("simulating x")
    for done in [*range(0, 1000, 7), 1000]:
        reporter.count(done, 1000)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "kvplan: simulating x"
    assert len(lines) == 1 + 11 and lines[1] == "kvplan: simulating x: 0 of 1,000 requests done"
    assert lines[2] == "kvplan: simulating x: 105 of 1,000 requests done"
    assert lines[-1] == "kvplan: simulating x: 1,000 of 1,000 requests done"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_live_line_prints_user_text_as_written():
    """On a terminal the phase is a rich status line; a model path or workload name holding `[/]` or
    `[bold]` is text, never markup (issue 12: rich's MarkupError ended `kvplan profile`)."""
    terminal = Terminal()
    with reporting(terminal) as progress:
        progress.stage("simulating [/] x [bold]y")
        progress.count(1, 2)
    assert "[/] x [bold]y" in terminal.getvalue()


def test_profile_names_each_phase(tiny_model_dir):
    # 2 GiB: the default release's measured path keeps at least 1 GiB free (docs/vllm/changes-0.34.md §1.4)
    done = run("profile", "--model", str(tiny_model_dir), "--backend", "fake", "--gpu-memory", "2GiB", "--json")
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)
    phases = [line for line in done.stderr.splitlines() if line.startswith("kvplan: ") and "still running" not in line]
    # predicting: the CUDA-graph pool, then (0.34.0's measured path) the memory measured after warmup
    assert [line.split(" ")[1] for line in phases] == ["starting", "loading", "profile", "predicting", "sizing",
                                                         "predicting", "allocating"]


def test_plan_for_a_gpu_names_each_phase():
    done = run("plan", "--model", "Qwen/Qwen2-0.5B-Instruct", "--gpu", "l4-24gb", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kind"] == "kvplan.plan"
    # a phase over HEARTBEAT_S on a loaded machine also says it is still running: not a phase
    phases = [line for line in done.stderr.splitlines() if "still running" not in line]
    assert [line.split(" ")[1] for line in phases] == [
        "predicting", "starting", "loading", "profile", "predicting", "sizing", "predicting"]


def test_simulate_names_the_run_and_counts_requests(tmp_path: Path):
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(mix(arrival={"process": "poisson", "rate": 20.0, "count": 400})))
    done = run("simulate", str(workload), "--json")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == "kvplan: simulating w.json"
    assert any(line.startswith("kvplan: simulating w.json: ") and "of 400 requests done" in line for line in lines)


def _wait_for(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_a_long_phase_says_it_is_still_running_in_a_log():
    """Issue 24, item 8: a phase that runs on (a CPU forward of minutes) is never silent when piped."""
    stream = io.StringIO()
    with reporting(stream, heartbeat_s=0.05) as progress:
        progress.stage("profile run: 8192 tokens")
        assert _wait_for(lambda: "still running" in stream.getvalue())
        progress.stage("sizing the KV cache")
    lines = stream.getvalue().splitlines()
    assert lines[0] == "kvplan: profile run: 8192 tokens"
    beat = next(line for line in lines if "still running" in line)
    assert beat.startswith("kvplan: profile run: 8192 tokens: still running, ") and beat.endswith(" so far")
    assert lines[-1].startswith("kvplan: sizing the KV cache")


class Live:
    def __init__(self) -> None:
        self.texts: list[str] = []

    def update(self, text: str) -> None:
        self.texts.append(text)


def test_the_live_line_shows_the_time_a_phase_has_taken(monkeypatch):
    monkeypatch.setattr(progress_module, "LIVE_TICK_S", 0.02)
    live = Live()
    reporter = Reporter(io.StringIO(), live)
    reporter.start()
    try:
        reporter.stage("loading m")
        assert _wait_for(lambda: any(re.fullmatch(r"loading m \([0-9.]+ ms\)", text) for text in live.texts))
    finally:
        reporter.stop()


def test_a_cpu_forward_is_estimated_before_it_runs(tiny_model_dir):
    assert forward_seconds(1e9, 1000, 1e12) == 2.0
    # 4 GiB: on 0.34.0's measured path (the default release) vLLM keeps a margin of at least 1 GiB
    done = run("profile", "--model", str(tiny_model_dir), "--backend", "cpu", "--gpu-memory", "4GiB", "--json")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    estimate = next(i for i, line in enumerate(lines) if "cpu backend's profile run is a real forward" in line)
    assert re.search(r"about [0-9.]+ (ms|s|min)", lines[estimate]) and "GFLOP/s measured" in lines[estimate]
    assert lines[estimate + 1].startswith("kvplan: profile run")     # said before the forward starts
