"""JUnit XML: one testcase per case x check, so CI systems show each verdict."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from kernelcheck.results import Report


def to_junit(report: Report) -> str:
    counts = report.counts()
    suite = ET.Element(
        "testsuite",
        name=f"kernelcheck.{report.op}",
        tests=str(len(report.results)),
        failures=str(counts["fail"]),
        errors=str(counts["error"] + counts["timeout"] + counts["crash"]),
        skipped=str(counts["skip"]),
        time=f"{report.summary()['wall_time_s']:.3f}",
    )
    for r in report.results:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"kernelcheck.{r.op}.{r.candidate}",
            name=f"{r.case_id}-{r.check}",
            time=f"{r.duration_s:.4f}",
        )
        detail = f"{r.message}\nrepro: {r.repro}"
        if r.status == "fail":
            ET.SubElement(case, "failure", message=r.message, type=r.check).text = detail
        elif r.status in ("error", "timeout", "crash"):
            ET.SubElement(case, "error", message=r.message, type=r.status).text = detail
        elif r.status == "skip":
            ET.SubElement(case, "skipped", message=r.message)
    if report.interrupted:
        ET.SubElement(
            suite, "system-err"
        ).text = f"interrupted ({report.interrupted}); not run: {', '.join(report.not_run)}"
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
