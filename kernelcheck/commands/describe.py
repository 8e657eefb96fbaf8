"""What ``kernelcheck list`` and ``kernelcheck doctor`` print: the dicts of
:func:`kernelcheck.api.describe` and :func:`kernelcheck.api.doctor` as lines.

Names, paths and reasons are data, printed literally (never as markup or ``:emoji:``
codes); not on a terminal, each line is wrapped at 80 columns, continuations indented.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from kernelcheck.wrap import INDENT, fill, log_width


def say(console: Console, head: str, rest: str = "", style: str = "") -> None:
    """One line: ``head`` in ``style``, then ``rest``; wrapped for a log, continuations
    indented past the line's own indent."""
    lead = head[: len(head) - len(head.lstrip())]
    text = fill(head + rest, log_width(console.is_terminal, console.width), lead + INDENT)
    console.print(Text.assemble((text[: len(head)], style), text[len(head) :]), soft_wrap=True)


def render_list(info: dict, console: Console) -> None:
    """Each device's availability once, then per op its candidates: where each runs and
    why not (an unavailable device's reason is the one given above), bench-only ones
    marked; then the checks."""
    devices = info.get("devices", {})
    for name, d in devices.items():
        state = "available" if d["available"] else f"unavailable: {d['reason']}"
        say(console, f"device {name}", f": {state}", "bold")
    for name, op in info["ops"].items():
        say(console, f"op {name}", f": {op['description']}  ({op['source']})", "bold")
        for cname, cand in op["candidates"].items():
            say(console, f"  candidate {cname}", f" = {cand['callable']}", "cyan")
            if cand.get("bench_only"):
                say(console, "      bench only", ": timed by bench, never checked by run")
            for dev, verdict in cand["runs_here"].items():
                if verdict == "yes":
                    say(console, f"      {dev}: runs here", style="green")
                    continue
                if verdict.startswith(f"needs device {dev}: ") and dev in devices:
                    verdict = f"device {dev} unavailable (see above)"
                say(console, f"      {dev}: cannot run", f": {verdict}", "yellow")
    say(console, "checks", style="bold")
    for name, summary in info["checks"].items():
        say(console, f"  {name}", f": {summary}")


def render_doctor(info: dict, console: Console) -> None:
    """torch, each device (why one is missing), the native libraries, the NPU stack."""
    say(console, f"torch {info['torch']}", f" (CUDA build: {info['torch_cuda'] or 'no'})")
    for name, d in info["devices"].items():
        state = ": available" if d["available"] else f": unavailable: {d['reason']}"
        say(console, f"device {name}", state, "green" if d["available"] else "yellow")
    for kind, libs, build in (
        ("native", info["native_libraries"], "build"),
        ("helper", info["verifier_libraries"], "loop"),
    ):
        for name, lib in libs.items():
            parts = [lib.get("path"), lib.get("reason")]
            if lib.get("isa"):
                note = f": {lib['isa_note']}" if lib.get("isa_note") else ""
                parts.append(f"({lib['isa']} {build} in use{note})")
            rest = " ".join(p for p in parts if p)
            say(console, f"{kind} {name}: {lib['status']}", f" {rest}" if rest else "")
    npu = info["npu_stack"]
    cann = "found" if npu["cann_found"] else "not found"
    say(console, "torch_npu", f": {npu['torch_npu']}; CANN: {cann} at {npu['cann_home']}")
