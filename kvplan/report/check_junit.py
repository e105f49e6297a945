"""The check report as JUnit XML, the structure CI test reporters read (GitLab, Jenkins, GitHub
test-report actions): `testsuites` > one `testsuite` per group (capacity, each workload) with its
counts > one `testcase` per assertion, with a `failure` element for each that failed."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from kvplan.errors import KvplanError
from kvplan.files import write_output_text
from kvplan.report.check_markdown import requirement
from kvplan.report.text import markup_text
from kvplan.usecases.check.assertions import AssertionResult, format_margin, format_value
from kvplan.usecases.check.evaluate import CheckReport


def _suite_name(report: CheckReport, group: str) -> str:
    return f"{report.name}: {group}"


def _class_name(report: CheckReport, group: str) -> str:
    return "kvplan.check." + ".".join(re.sub(r"[^A-Za-z0-9_-]+", "_", part) for part in (report.name, group))


def _case(report: CheckReport, result: AssertionResult) -> ET.Element:
    case = ET.Element("testcase", name=result.name, classname=_class_name(report, result.group), time="0")
    measured = format_value(result.kind, result.measured)
    if not result.passed:
        failure = ET.SubElement(case, "failure", type="AssertionFailed",
                                message=f"{result.name}: measured {measured}, required {requirement(result)}")
        failure.text = "\n".join(line for line in (
            f"margin: {format_margin(result)}", result.detail, f"what to change: {result.hint}" if result.hint else "",
        ) if line)
    out = ET.SubElement(case, "system-out")
    out.text = f"required {requirement(result)}; measured {measured}" + (f" ({result.detail})" if result.detail else "")
    return case


def junit_xml(report: CheckReport) -> str:
    failures = len(report.failures)
    root = ET.Element("testsuites", name=f"kvplan check {report.name}", tests=str(len(report.results)),
                      failures=str(failures), errors="0", time="0")
    for group in report.groups:
        results = [result for result in report.results if result.group == group]
        suite = ET.SubElement(root, "testsuite", name=_suite_name(report, group), tests=str(len(results)),
                              failures=str(sum(not r.passed for r in results)), errors="0", skipped="0", time="0")
        for result in results:
            suite.append(_case(report, result))
    for element in root.iter():
        # names come from the user's spec and files: only characters XML 1.0 can carry
        element.attrib = {key: markup_text(value) for key, value in element.attrib.items()}
        if element.text:
            element.text = markup_text(element.text)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(report: CheckReport, path: Path) -> None:
    """Write the XML whole (a temporary file renamed into place); the command has checked the path
    against its inputs before the work started (`kvplan.cli.outputs`)."""
    try:
        write_output_text(path, junit_xml(report))
    except OSError as error:
        raise KvplanError(f"--junit {path}: cannot write it ({error.strerror})") from None
