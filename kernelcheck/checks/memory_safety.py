"""``memory_safety``: what NVIDIA's compute-sanitizer reported while a case's CUDA kernels ran.

Output comparisons cannot see an out-of-bounds read whose value is masked, a shared-memory
race that shows once in a thousand runs or a read of uninitialised memory; the sanitizer's
tools (memcheck, racecheck, initcheck, synccheck) can. ``kernelcheck run --sanitize TOOL``
runs each isolated worker under it (``runner/sanitize.py``), and this module turns the text
it logged during a case into the check's outcome: the first report (its kind, kernel,
address and thread) in the message, the number of reports in the metrics.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kernelcheck.checks.outcome import Outcome

NAME = "memory_safety"
PREFIX = "========="
# lines that are not a finding: the banner, the summaries, the tool's own notes
_NOT_FINDINGS = re.compile(
    r"^(COMPUTE-SANITIZER|CUDA-MEMCHECK|(ERROR|RACECHECK|LEAK) SUMMARY|Target application|"
    r"This may be|No (errors|hazards))",
)
_SEVERITY = re.compile(r"^(?:error|warning): ", re.IGNORECASE)
_SUMMARY = re.compile(r"^(?:ERROR|RACECHECK) SUMMARY: (\d+) (?:error|hazard)")
_THREAD = re.compile(r"by thread (\(\d+,\d+,\d+\)) in block (\(\d+,\d+,\d+\))")
_ADDRESS = re.compile(r"Address (0x[0-9a-fA-F]+)(.*)")
# "at kernel(args)+0x1b0 in file.cu:42" (2022 and later) or "at 0x1b0 in file.cu:42:kernel"
_AT_NEW = re.compile(r"^at (?!0x)(.+?)\+0x[0-9a-fA-F]+")
_AT_OLD = re.compile(r"^at 0x[0-9a-fA-F]+ in (?:(\S+?):\d+:)?(.+?)(?: \[.*\])?$")
_RACE_SITE = re.compile(r"(?:Write|Read) access (at .+)$")
# lines that belong to the report above them even when not indented (the older format)
_CONTINUED = ("at ", "by thread", "Address ", "and ", "Saved host", "Host Frame", "Device Frame")


@dataclass
class Finding:
    """One report of the sanitizer: its first line and what the lines after it locate."""

    kind: str
    kernel: str | None = None
    thread: str | None = None
    address: str | None = None
    lines: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """``Invalid __global__ read of size 4 bytes in logp_forward_kernel at 0x7f.. (out
        of bounds), thread (31,0,0) block (0,0,0)``: what the first report says."""
        out = self.kind
        if self.kernel:
            out += f" in {self.kernel}"
        if self.address:
            out += f" at {self.address}"
        if self.thread:
            out += f", {self.thread}"
        return out


def _records(text: str) -> list[list[str]]:
    """The sanitizer's lines grouped into reports: a report starts at a line that is not
    indented after the prefix; the indented lines after it belong to it."""
    records: list[list[str]] = []
    for raw in text.splitlines():
        if not raw.startswith(PREFIX):
            continue
        body = raw[len(PREFIX) :]
        stripped = body.strip()
        if not stripped:
            continue
        if records and (body.startswith("  ") or stripped.startswith(_CONTINUED)):
            records[-1].append(stripped)
        else:
            records.append([stripped])
    return records


def _kernel(line: str) -> str | None:
    for pattern, group in ((_AT_NEW, 1), (_AT_OLD, 2)):
        found = pattern.match(line.strip())
        if found:
            return found.group(group).strip()
    return None


def parse(text: str) -> list[Finding]:
    """Every finding in a compute-sanitizer log, in order (banner and summaries left out)."""
    findings = []
    for record in _records(text):
        head = record[0]
        if _NOT_FINDINGS.match(head) or head.startswith("Saved host backtrace"):
            continue
        finding = Finding(kind=_SEVERITY.sub("", head).rstrip("."), lines=record)
        race = _RACE_SITE.search(head)
        if race:
            finding.kernel = _kernel(race.group(1))
        for line in record[1:]:
            if finding.kernel is None and line.startswith("at "):
                finding.kernel = _kernel(line)
            elif (found := _THREAD.search(line)) and finding.thread is None:
                finding.thread = f"thread {found.group(1)} block {found.group(2)}"
            elif (found := _ADDRESS.match(line)) and finding.address is None:
                rest = found.group(2).strip()
                finding.address = found.group(1) + (
                    f" ({rest.removeprefix('is ')})" if rest else ""
                )
        findings.append(finding)
    return findings


def reported_errors(text: str) -> int | None:
    """The count in the log's last ``ERROR SUMMARY`` (or ``RACECHECK SUMMARY``); None
    without one (the process has not ended)."""
    counts = [
        int(found.group(1)) for record in _records(text) if (found := _SUMMARY.match(record[0]))
    ]
    return counts[-1] if counts else None


def outcome(text: str, tool: str) -> Outcome:
    """The check's verdict on the sanitizer's log of one case: fail on any finding, with
    the first in the message; pass when the log holds none."""
    findings = parse(text)
    metrics = {"tool": tool, "findings": len(findings)}
    if not findings:
        return Outcome("pass", f"compute-sanitizer {tool}: no findings", metrics)
    more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
    message = f"compute-sanitizer {tool}: {findings[0].describe()}{more}"
    return Outcome("fail", message, metrics)
