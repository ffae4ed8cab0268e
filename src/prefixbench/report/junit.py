"""The verdicts as JUnit XML, the test-result format CI systems display and gate on.

One test suite per run, one test case per host x criterion (``classname`` the host,
``name`` the criterion): PASS passes, FAIL is a ``<failure>`` carrying the verdict's
numbers, INCONCLUSIVE and NOT_RUN are ``<skipped>`` with the reason. Every bench without
a result is an ``<error>`` test case of its own, so a CI view shows an incomplete run
as broken, not as green.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from prefixbench.measure.atomic import write_text_atomic
from prefixbench.report.model import Summary
from prefixbench.report.vocab import FAIL, INCONCLUSIVE, NOT_RUN

__all__ = ["junit_xml", "write_junit"]


def junit_xml(s: Summary) -> str:
    """The JUnit XML document of a run's summary."""
    suite = ET.Element("testsuite", name=f"prefixbench {s.run_id}",
                       timestamp=s.generated_at)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for h in s.hosts:
        for v in h.verdicts:
            case = ET.SubElement(suite, "testcase", classname=h.host, name=v.name, time="0")
            counts["tests"] += 1
            if v.status == FAIL:
                counts["failures"] += 1
                ET.SubElement(case, "failure", message=v.detail[:500],
                              type="verdict").text = (
                    f"{v.criterion}\nthreshold: {v.threshold}\n{v.detail}")
            elif v.status in (INCONCLUSIVE, NOT_RUN):
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=f"{v.status}: {v.detail}"[:500])
            ET.SubElement(case, "system-out").text = v.detail
    for f in s.failures:
        case = ET.SubElement(suite, "testcase", classname=f.host,
                             name=f"bench {f.configuration}/{f.workload} rep{f.repetition}",
                             time="0")
        counts["tests"] += 1
        counts["errors"] += 1
        ET.SubElement(case, "error", message=f.error[:500], type="bench").text = (
            f"{f.error}\n{f.path}\n{f.log_tail}")
    for key, value in counts.items():
        suite.set(key, str(value))
    root = ET.Element("testsuites", name="prefixbench")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(s: Summary, path: str | Path) -> Path:
    """Write :func:`junit_xml` atomically to ``path``."""
    out = Path(path)
    write_text_atomic(out, junit_xml(s))
    return out
