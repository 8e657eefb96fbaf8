"""What `list` and `doctor` print (kernelcheck/commands/describe.py)."""

from __future__ import annotations

import io

from rich.console import Console

from kernelcheck.commands.describe import render_doctor, render_list

NPU = "torch_npu not installed; CANN not found: ASCEND_HOME_PATH is not set " * 3


def _info() -> dict:
    runs = {"cpu": "yes", "npu": f"needs device npu: {NPU}"}
    cand = {"callable": "m:f", "runs_here": runs, "bench_only": False}
    return {
        "devices": {"cpu": {"available": True, "reason": ""},
                    "npu": {"available": False, "reason": NPU}},
        "ops": {"logp": {"description": "a :x: [bold]op[/bold]", "source": "/s/logp.toml",
                         "candidates": {f"c{i}": dict(cand) for i in range(7)}
                         | {"eager": {**cand, "bench_only": True}}}},
        "checks": {"contract": "exact values"},
    }  # fmt: skip


def _print(fn, info) -> str:
    out = io.StringIO()
    fn(info, Console(file=out, width=200))  # not a terminal: wrapped at 80
    return out.getvalue()


def test_list_gives_a_device_reason_once_and_marks_bench_only_candidates():
    text = _print(render_list, _info())
    assert text.count("ASCEND_HOME_PATH") == 3  # once: the device's line, as given
    assert text.count("npu: cannot run: device npu unavailable (see above)") == 8
    eager = text.split("candidate eager")[1].splitlines()
    assert eager[1].strip() == "bench only: timed by bench, never checked by run"
    assert "bench only" not in text.split("candidate eager")[0]
    assert "a :x: [bold]op[/bold]" in text  # data, literally
    assert all(len(x) <= 80 for x in text.splitlines())


def test_list_keeps_a_reason_that_is_not_the_device():
    info = _info()
    info["ops"]["logp"]["candidates"]["c0"]["runs_here"]["npu"] = "cannot load: ImportError"
    assert "npu: cannot run: cannot load: ImportError" in _print(render_list, info)


def test_doctor_lines_fit_80_columns_but_a_path_stays_whole():
    path = "/x/" + "lib/" * 20 + "libkc_logp_cpu.so"
    lib = {"status": "available", "path": path, "reason": "", "isa": "avx2"}
    info = {
        "torch": "2.13", "torch_cuda": None,
        "devices": {"npu": {"available": False, "reason": NPU}},
        "native_libraries": {"cpu": lib}, "verifier_libraries": {"metrics": lib},
        "npu_stack": {"torch_npu": "not installed", "cann_home": "/usr/local/Ascend",
                      "cann_found": False},
    }  # fmt: skip
    lines = _print(render_doctor, info).splitlines()
    assert [x for x in lines if len(x) > 80] == [f"    {path}"] * 2  # a path is one word
    assert "native cpu: available" in lines and "    (avx2 build in use)" in lines
