"""`kvplan check SPEC`: capacity and workload assertions for CI, with exit codes."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import typer

from kvplan.cli.options import EngineOptions, engine_flags, flag_option, network_access, read_engine_options
from kvplan.cli.outputs import prepare_outputs
from kvplan.cli.root import JSON, app
from kvplan.hub import hub_access
from kvplan.report.jsonout import emit_json
from kvplan.report.stderr import warn_once

REPORT_WIDTH = 120
SUMMARY_VARIABLE = "GITHUB_STEP_SUMMARY"


@app.command("check")
def check_command(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="Check spec (TOML, or JSON): docs/check.md."),
    junit: Path | None = typer.Option(None, "--junit", help="Also write the verdicts as JUnit XML to FILE."),
    json_output: bool = JSON,
    trust_remote_code: bool = flag_option(
        "trust_remote_code",
        "Allow transformers to run the code of the target's model (never enabled by a spec or profile)."),
    allow_network: bool = typer.Option(
        False, "--allow-network",
        help="Let a model that is neither bundled, local nor cached be fetched from the Hugging Face hub; without "
        "it check uses no network."),
    offline: bool = flag_option("offline", "Never use the network (the default of check)."),
    revision: str | None = flag_option("revision", "Hub revision of the target's model."),
    vllm_version: str | None = engine_flags(("vllm_version",))["vllm_version"].typer_option(),
) -> None:
    """Evaluate a spec's assertions on a saved profile or a plan; no GPU and no network needed.

    Exit codes: 0 every assertion holds, 1 one failed, 2 the spec or its inputs are invalid.
    With $GITHUB_STEP_SUMMARY set, a Markdown summary is appended to it (a warning if it cannot be)."""
    engine = read_engine_options({"vllm_version": vllm_version, "revision": revision, "offline": offline,
                                  "trust_remote_code": trust_remote_code})
    access = network_access(may_fetch=allow_network, offline=engine.offline, revision=engine.args.revision,
                            refusal="kvplan check uses no network unless --allow-network is given")
    with hub_access(access):
        _check(spec_path, junit, json_output, engine.trust_remote_code, engine)


def _check(spec_path: Path, junit: Path | None, json_output: bool, trust_remote_code: bool,
           engine: EngineOptions) -> None:
    from kvplan.report.check_json import check_record
    from kvplan.report.check_markdown import append_step_summary
    from kvplan.usecases.check.evaluate import evaluate, spec_inputs
    from kvplan.usecases.check.spec import load_spec

    spec = load_spec(spec_path)
    if engine.vllm_version is not None:
        spec = dataclasses.replace(spec, release=engine.release_or_default())
    inputs = spec_inputs(spec)
    summary = Path(os.environ[SUMMARY_VARIABLE]) if os.environ.get(SUMMARY_VARIABLE) else None
    prepare_outputs([("--junit", junit)], inputs)
    if summary is not None and junit is not None and _one_file(summary, junit):
        from kvplan.errors import KvplanError

        raise KvplanError(f"--junit {junit}: that is ${SUMMARY_VARIABLE}, which gets the Markdown summary; "
                          "give each its own file")
    report = evaluate(spec, trust_remote_code=trust_remote_code)
    if junit is not None:
        from kvplan.report.check_junit import write_junit

        write_junit(report, junit)
    append_step_summary(report, protected=inputs)
    warn_once(report.weights_warnings)
    if json_output:
        emit_json(check_record(report))
    else:
        from kvplan.report.check_console import render_check
        from kvplan.report.stdout import ReportConsole

        # CI logs are not terminals: give the table room instead of rich's 80-column default
        render_check(report, ReportConsole(highlight=False, width=None if sys.stdout.isatty() else REPORT_WIDTH))
    if junit is not None:
        print(f"kvplan: wrote {len(report.results)} test cases to {junit}", file=sys.stderr)
    if report.exit_code:
        raise typer.Exit(report.exit_code)


def _one_file(a: Path, b: Path) -> bool:
    from kvplan.files import same_file

    return same_file(a, b)
