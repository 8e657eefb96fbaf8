"""The command line, as users and CI run it: exit codes, formats, outputs, user specs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kernelcheck.checks import CHECKS
from tests.conftest import HANG_S, SPECS

REPO = Path(__file__).resolve().parents[1]
# --no-sweep: one case per (candidate, dtype, shape); tests/test_api.py covers the sweeps
SMALL = ["--dtype", "fp32", "--batch", "2", "--seq", "3", "--vocab", "33", "--seed", "0",
         "--no-sweep"]  # fmt: skip


def kc(*args, env=None, cwd=None):
    env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "kernelcheck", *args], capture_output=True, text=True, env=env,
        cwd=cwd, timeout=HANG_S,
    )  # fmt: skip


@pytest.mark.slow
def test_run_passes_and_writes_every_report(tmp_path):
    out, xml = tmp_path / "r.json", tmp_path / "r.xml"
    p = kc("run", "--op", "logp", "--candidate", "torch", *SMALL, "--json-out", str(out),
           "--junit-out", str(xml))  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "PASSED" in p.stdout
    data = json.loads(out.read_text())
    n = len(CHECKS)  # every check, one case
    assert data["summary"]["passed"] and data["summary"]["counts"]["pass"] == n
    assert len(ET.parse(xml).getroot().findall(".//testcase")) == n


@pytest.mark.parametrize("fmt,marker", [("plain", "suite=logp passed=True"),
                                        ("markdown", "### kernelcheck `logp`"),
                                        ("json", '"schema_version": 2'),
                                        ("table", "logp / torch on cpu")])  # fmt: skip
@pytest.mark.slow
def test_every_format(fmt, marker):
    p = kc("run", "--op", "logp", "--candidate", "torch", *SMALL, "--checks",
           "forward_accuracy,contract", "--format", fmt)  # fmt: skip
    assert p.returncode == 0 and marker in p.stdout, p.stderr


@pytest.mark.slow
def test_failing_check_exits_1_with_reason_and_repro(tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text('op = "logp"\n[[candidate]]\nname = "bad"\ncallable = '
                    '"broken_logp:off_by_small"\ndevices = ["cpu"]\n')  # fmt: skip
    env = {"PYTHONPATH": str(REPO / "tests" / "fixtures")}
    p = kc("run", "--op", "logp", "--spec", str(spec), "--candidate", "bad", *SMALL, "--checks",
           "forward_accuracy", "--format", "plain", env=env)  # fmt: skip
    assert p.returncode == 1
    repro = next(line for line in p.stdout.splitlines() if "repro:" in line).split("repro: ")[1]
    assert "--spec" in repro and "--checks forward_accuracy" in repro and "--seed 0" in repro
    command = repro.replace("kernelcheck", f"{sys.executable} -m kernelcheck", 1)
    env_all = {**os.environ, **env}
    again = subprocess.run(command, shell=True, capture_output=True, text=True, env=env_all)
    assert again.returncode == 1 and "outside atol=1e-05" in again.stdout


@pytest.mark.slow
def test_user_spec_outside_the_repo_adds_a_candidate(tmp_path):
    import shutil

    for f in ("my_kernels.toml", "my_kernels.py"):
        shutil.copy(SPECS / f, tmp_path)
    p = kc("run", "--op", "logp", "--spec", "my_kernels.toml", "--candidate", "mykernel", *SMALL,
           cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert "logp / mykernel on cpu" in p.stdout


@pytest.mark.slow
def test_the_exact_user_command_on_the_default_grid(tmp_path):
    """The issue's command as written: the default grid, one user candidate."""
    import shutil

    for f in ("my_kernels.toml", "my_kernels.py"):
        shutil.copy(SPECS / f, tmp_path)
    p = kc("run", "--op", "logp", "--spec", "my_kernels.toml", "--candidate", "mykernel",
           "--no-check-grad", "--checks", "forward_accuracy,contract", cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr


@pytest.mark.slow
def test_second_op_declared_only_in_a_spec():
    p = kc("run", "--op", "log_softmax", "--spec", str(SPECS / "log_softmax.toml"),
           "--candidate", "torch", "--format", "json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    checks = {r["check"] for r in data["results"]}
    assert {"forward_accuracy", "backward_accuracy", "forward_invariance", "contract"} <= checks
    spec = str(SPECS / "log_softmax.toml")
    lossy = kc("run", "--op", "log_softmax", "--spec", spec, "--candidate", "lossy", "--dtype",
               "fp32", "--checks", "forward_accuracy")  # fmt: skip
    assert lossy.returncode == 1


BAD_FLAGS = [
    (
        ["--op", "nope"],
        "unknown op 'nope'; valid ops: entropy, linear_logp, logp, ratio_kl, rms_norm, swiglu",
    ),
    (["--op", "logp", "--candidate", "nope"], "unknown candidate 'nope' for op logp; valid: torch"),
    (["--op", "logp", "--dtype", "fp8"], "unknown dtype 'fp8'; valid: fp32, bf16, fp16"),
    (["--op", "logp", "--device", "tpu"], "unknown device 'tpu'; valid: auto, cpu, cuda, npu"),
    (["--op", "logp", "--device", "npu"], "device npu is not available here: torch_npu"),
    (["--op", "logp", "--device", "cuda"], "device cuda is not available here"),
    (
        ["--op", "logp", "--candidate", "ascend"],
        "candidate ascend needs device npu, but --device auto picked cpu (npu: torch_npu",
    ),
    (["--op", "logp", "--checks", "forward_acuracy"], "unknown check 'forward_acuracy'; valid:"),
    (["--op", "logp", "--batch", "0"], "--batch: expected an integer >= 1, got 0"),
    (["--op", "logp", "--vocab", "-5"], "--vocab: expected an integer >= 1, got -5"),
    (["--op", "logp", "--batch", "x"], "--batch: expected an integer, got 'x'"),
    (["--op", "logp", "--seed", "abc"], "--seed: expected an integer, got 'abc'"),
    (["--op", "logp", "--timeout", "soon"], "--timeout: expected a number, got 'soon'"),
    (["--op", "logp", "--shape", "batch=2,vocb=17"], "--shape: unknown dim 'vocb' (did you mean"),
    (["--op", "logp", "--device", "gpu"], "unknown device 'gpu' (did you mean 'cuda'?)"),
    (
        ["--op", "logp", "--candidate", "cuda"],
        "candidate cuda needs device cuda, but --device auto picked cpu (cuda: ",
    ),
    (["--op", "logp", "--shard", "3/2"], "--shard: expected 1 <= K <= N, got '3/2'"),
    (
        ["--op", "logp", "--json-out", "/dev/null/dir/r.json"],
        "--json-out: cannot make folder /dev/null/dir",
    ),
    (["--op", "logp", "--json-out", "/proc/r.json"], "--json-out: cannot write in /proc"),
    (["--op", "logp", "--format", "xml"], "unknown format 'xml'"),
    (["--op", "logp", "--distributions", "uniform"], "unknown distribution 'uniform'"),
    (["--op", "logp", "--timeout", "0"], "--timeout: expected a number of seconds > 0"),
    (["--op", "logp", "--spec", "/no/such.toml"], "/no/such.toml: spec file not found"),
    (["--op", "logp", "--spec", str(REPO / "specs")], "specs: is a directory, not a spec; give"),
    (["--op", "logp", "--shrink-budget", "-1"], "--shrink-budget: expected a number >= 0, got -1"),
    (["--op", "logp", "--shrink-budget", "nan"], "--shrink-budget: expected a number >= 0"),
    (["--op", "logp", "--baseline-factor", "nan"], "--baseline-factor: expected a number >= 1"),
    (["--op", "logp", "--timeout", "-1"], "--timeout: expected a number of seconds > 0"),
    (["--op", "logp", "--seq", "-1"], "--seq: expected an integer >= 1, got -1"),
    (["--op", "logp", "--attr", "temperature=abc"], "temperature='abc': expected a finite float"),
    (["--op", "logp", "--attr", "temperature=nan"], "temperature=nan: expected a finite float"),
    (["--op", "logp", "--attr", "with_mask=2"], "with_mask switches an input on or off"),
    (["--op", "logp", "--nope"], "No such option: --nope"),
]


# one of each kind runs in the quick suite (a process each, 3 s of imports); all in CI's slow
QUICK_FLAGS = {"--op nope", "--op logp --checks forward_acuracy",
               "--op logp --shape batch=2,vocb=17", "--op logp --nope"}  # fmt: skip


def _quick_or_slow(cases: list, quick) -> list:
    """``cases`` as params, those whose id is not in ``quick`` marked slow."""
    return [
        pytest.param(*case, id=name, marks=() if name in quick else pytest.mark.slow)
        for case in cases
        for name in [" ".join(case[0])]
    ]


@pytest.mark.parametrize("args,fragment", _quick_or_slow(BAD_FLAGS, QUICK_FLAGS))
def test_bad_input_is_one_line_and_exit_2(args, fragment):
    p = kc("run", *args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernelcheck: error: "), p.stderr
    assert fragment in lines[0]
    assert "Traceback" not in p.stderr


def test_debug_shows_the_traceback():
    p = kc("--debug", "run", "--op", "nope")
    assert p.returncode == 2 and "Traceback" in p.stderr


def test_list_says_why_a_candidate_cannot_run_and_survives_a_broken_module(tmp_path):
    spec = tmp_path / "broken.toml"
    spec.write_text('op = "logp"\n[[candidate]]\nname = "broken"\ncallable = '
                    '"broken_module:logp"\ndevices = ["cpu"]\n')  # fmt: skip
    env = {"PYTHONPATH": str(REPO / "tests" / "fixtures")}
    p = kc("list", "--spec", str(spec), "--format", "json", env=env)
    assert p.returncode == 0, p.stderr
    cands = json.loads(p.stdout)["ops"]["logp"]["candidates"]
    assert cands["torch"]["runs_here"]["cpu"] == "yes"
    assert "needs device npu" in cands["ascend"]["runs_here"]["npu"]
    assert "ImportError: libmykernel.so" in cands["broken"]["importable"]


@pytest.mark.slow
def test_a_candidate_that_cannot_load_stops_the_run_named_or_not(tmp_path):
    """One rule: exit 2 with one line before anything runs, whether --candidate named it
    or not; `list` says `cannot load` rather than `runs here`."""
    spec = tmp_path / "broken.toml"
    spec.write_text('op = "logp"\n[[candidate]]\nname = "broken"\ncallable = '
                    '"broken_module:logp"\ndevices = ["cpu"]\n')  # fmt: skip
    env = {"PYTHONPATH": str(REPO / "tests" / "fixtures")}
    for named in ([], ["--candidate", "broken"]):
        p = kc("run", "--op", "logp", "--spec", str(spec), *SMALL, *named,
               "--checks", "forward_accuracy", env=env)  # fmt: skip
        assert p.returncode == 2, p.stdout + p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "candidate.broken.callable: cannot load" in lines[0], lines
    p = kc("list", "--spec", str(spec), env=env)
    assert p.returncode == 0
    assert "cpu: cannot run: cannot load: " in p.stdout and "libmykernel.so" in p.stdout


def test_doctor_json_has_native_libraries():
    p = kc("doctor", "--format", "json")
    assert p.returncode == 0
    data = json.loads(p.stdout)
    libs = data["native_libraries"]
    assert set(libs) == {"cpu", "cuda", "ascend"}
    for entry in libs.values():
        assert (
            entry["status"] in ("available", "built", "missing")
            and "path" in entry
            and "reason" in entry
        )
    assert data["devices"]["cpu"]["available"] is True
    if libs["cpu"]["status"] == "available":  # which build of the cpu kernel runs here
        assert libs["cpu"]["isa"] in ("portable", "avx2", "avx512")
    helpers = data["verifier_libraries"]  # kernelcheck's own: the metrics loop, the keeper
    assert set(helpers) == {"metrics", "keep_large"}
    assert all(h["status"] in ("available", "missing", "off") for h in helpers.values())


def test_doctor_says_which_cpu_build_runs_and_why():
    """KERNELCHECK_CPU_ISA=portable: doctor names the build and the setting that chose it; a
    build that cannot run here is one line that says why."""
    p = kc("doctor", env={"KERNELCHECK_CPU_ISA": "portable"})
    assert p.returncode == 0
    text = " ".join(p.stdout.split())  # piped, doctor wraps its lines at 80 columns
    if "native cpu: available" in text:
        assert "(portable build in use: KERNELCHECK_CPU_ISA=portable)" in text
    p = kc("doctor", "--format", "json", env={"KERNELCHECK_CPU_ISA": "sse2"})
    lib = json.loads(p.stdout)["native_libraries"]["cpu"]
    if lib["status"] == "available":
        assert lib["reason"] == (
            "KERNELCHECK_CPU_ISA: unknown instruction set 'sse2' (one of portable, avx2, avx512)"
        )


@pytest.mark.slow
def test_torch_npu_without_cann_leaves_kernelcheck_working(tmp_path):
    """A stand-in torch_npu package whose import fails the way one without CANN does,
    registered as a torch backend: torch's autoload would import it, and so break
    ``import torch``, but for the command's own TORCH_DEVICE_BACKEND_AUTOLOAD=0."""
    pkg = tmp_path / "torch_npu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        'raise ImportError("libhccl.so: cannot open shared object file")\n'
    )
    dist = tmp_path / "torch_npu-0.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_npu\nVersion: 0.0.0\n")
    (dist / "entry_points.txt").write_text("[torch.backends]\ntorch_npu = torch_npu:_autoload\n")
    env = {"PYTHONPATH": str(tmp_path)}
    p = kc("doctor", "--format", "json", env=env)
    assert p.returncode == 0, p.stderr
    npu = json.loads(p.stdout)["devices"]["npu"]
    assert not npu["available"] and "libhccl.so" in npu["reason"] and npu["torch_npu_installed"]
    p = kc("run", "--op", "logp", "--device", "npu", env=env)
    assert p.returncode == 2 and "torch_npu not importable: ImportError: libhccl.so" in p.stderr
    p = kc("run", "--op", "logp", "--candidate", "torch", *SMALL, "--checks", "contract", env=env)
    assert p.returncode == 0, p.stderr


@pytest.mark.slow
def test_github_step_summary(tmp_path):
    summary = tmp_path / "summary.md"
    p = kc("run", "--op", "logp", "--candidate", "torch", *SMALL, "--checks", "contract",
           env={"GITHUB_STEP_SUMMARY": str(summary)})  # fmt: skip
    assert p.returncode == 0 and summary.read_text().startswith(
        "### kernelcheck `logp` on cpu: PASSED"
    )


@pytest.mark.slow
def test_json_out_makes_its_folder_and_reports_are_world_readable(tmp_path):
    out = tmp_path / "out" / "r.json"
    p = kc("run", "--op", "logp", "--candidate", "torch", *SMALL, "--checks", "contract",
           "--json-out", str(out), "--junit-out", str(tmp_path / "x" / "r.xml"))  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert out.is_file() and (out.stat().st_mode & 0o777) == 0o644
    assert ((tmp_path / "x" / "r.xml").stat().st_mode & 0o044) == 0o044


def test_help_is_readable_at_80_columns():
    p = kc("run", "--help", env={"COLUMNS": "80"})
    assert p.returncode == 0
    lines = p.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert "<list[Path]>" not in p.stdout and "<str>" not in p.stdout
    for flag in ("--batch N", "--seq N", "--vocab N"):
        line = next(x for x in lines if x.strip().startswith(flag))
        assert len(line.split()) > 2, line  # has help text


def test_an_unavailable_candidate_says_auto_picked_the_device(catalog):
    from kernelcheck import api

    plan = api.plan(catalog, "logp", device="auto")
    for name, reason in plan.unavailable.items():
        if plan.device not in catalog.op("logp").candidates[name].devices:
            assert f"(--device auto picked {plan.device})" in reason, reason
    explicit = api.plan(catalog, "logp", device="cpu")
    assert all("auto" not in r for r in explicit.unavailable.values())


# A run that tested nothing is not green (exit 5); a native kernel missing on its own
# device is an error, not a silent "unavailable".

NATIVE_SPEC = """op = "logp"
[[candidate]]
name = "mine"
callable = "kernelcheck.candidates.torch_logp:logp"
devices = ["cpu"]
native = true
probe = "mine_probe:missing"
[[candidate]]
name = "elsewhere"
callable = "kernelcheck.candidates.torch_logp:logp"
devices = ["cuda"]
native = true
probe = "mine_probe:missing"
"""
MISSING = "libmine.so not built (simulated)"


@pytest.fixture
def native_spec(tmp_path):
    """A user spec: a native candidate whose probe says its cpu library is missing, and
    one for cuda only (on a cpu run that one is not on its own device)."""
    (tmp_path / "mine_probe.py").write_text(f"def missing(device):\n    return {MISSING!r}\n")
    spec = tmp_path / "mine.toml"
    spec.write_text(NATIVE_SPEC)
    return spec


def _summary_tail(stdout: str) -> tuple[list[str], str]:
    lines = stdout.rstrip("\n").splitlines()
    return lines[:-1], lines[-1]


@pytest.mark.slow
def test_a_run_of_skips_only_checked_nothing_and_exits_5(tmp_path):
    out = tmp_path / "r.json"
    p = kc("run", "--op", "logp", "--candidate", "torch", *SMALL, "--checks",
           "backward_accuracy", "--no-check-grad", "--format", "plain",
           "--json-out", str(out))  # fmt: skip
    assert p.returncode == 5, p.stdout + p.stderr
    before, verdict = _summary_tail(p.stdout)
    assert verdict.startswith("NOTHING CHECKED: ") and verdict.endswith(
        "; 0 (candidate, check) pairs ran"
    ), verdict
    assert "nothing checked for torch: backward checks are off (--no-check-grad)" in before
    summary = json.loads(out.read_text())["summary"]
    assert summary["pairs_run"] == 0 and summary["counts"]["skip"] == summary["total"] > 0
    assert {
        "what": "nothing checked for torch",
        "reason": "backward checks are off (--no-check-grad)",
    } in summary["not_checked"]


def test_a_report_without_results_is_exit_5():
    from kernelcheck.commands.verdict import exit_code
    from kernelcheck.results import Report

    assert exit_code(Report("logp", "1", "cpu")) == 5
    assert exit_code(Report("logp", "1", "cpu"), problem=True) == 1


@pytest.mark.slow
def test_a_native_candidate_missing_on_its_own_device_is_an_error(native_spec, tmp_path):
    out = tmp_path / "r.json"
    p = kc("run", "--op", "logp", "--spec", str(native_spec), *SMALL, "--checks",
           "forward_accuracy,contract", "--json-out", str(out))  # fmt: skip
    assert p.returncode == 1, p.stdout + p.stderr
    data = json.loads(out.read_text())
    errors = [r for r in data["results"] if r["candidate"] == "mine"]
    assert [(r["check"], r["status"], r["message"]) for r in errors] == [
        ("forward_accuracy", "error", MISSING),
        ("contract", "error", MISSING),
    ]
    assert {r["status"] for r in data["results"] if r["candidate"] == "torch"} == {"pass"}
    unavailable = data["summary"]["unavailable_candidates"]
    assert "mine" not in unavailable and "elsewhere" in unavailable  # not its own device
    assert f"ERROR mine-fp32-2x3x33 forward_accuracy: {MISSING}" in p.stdout
    assert p.stdout.splitlines()[-1].startswith("FAILED: ")
    assert "shrunk" not in p.stdout  # no kernel ran: nothing to shrink


@pytest.mark.parametrize("allow", [["--allow-missing", "mine"],
                                   ["--allow-missing", "elsewhere,mine"]])  # fmt: skip
@pytest.mark.slow
def test_allow_missing_reports_it_unavailable_and_passes(native_spec, tmp_path, allow):
    out = tmp_path / "r.json"
    p = kc("run", "--op", "logp", "--spec", str(native_spec), *SMALL, "--checks",
           "forward_accuracy,contract", "--json-out", str(out), *allow)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads(out.read_text())["summary"]
    assert summary["counts"]["error"] == 0
    assert summary["unavailable_candidates"]["mine"] == MISSING
    assert {"what": "candidate mine not checked", "reason": MISSING} in summary["not_checked"]


def test_allow_missing_names_a_candidate_of_the_op():
    p = kc("run", "--op", "logp", *SMALL, "--allow-missing", "nope")
    assert p.returncode == 2
    assert "--allow-missing: unknown candidate 'nope' for op logp; valid: torch" in p.stderr


@pytest.mark.slow
def test_the_summary_counts_pairs_and_says_what_was_not_checked(tmp_path):
    """Pairs that ran; one line per distinct reason, wrapped at 80 columns when piped
    (COLUMNS is wider); the verdict last."""
    out = tmp_path / "r.json"
    p = kc("run", "--op", "logp", "--candidate", "torch", *SMALL, "--checks",
           "forward_accuracy,backward_accuracy,contract", "--no-check-grad",
           "--json-out", str(out), env={"COLUMNS": "200"})  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads(out.read_text())["summary"]
    assert summary["pairs_run"] == 2
    assert summary["not_checked"][:2] == [
        {
            "what": "backward_accuracy not checked for torch",
            "reason": "backward checks are off (--no-check-grad)",
        },
        {"what": "dtypes bf16, fp16 not checked", "reason": "not in the plan (--dtype fp32)"},
    ]
    before, verdict = _summary_tail(p.stdout)
    assert verdict.startswith("PASSED: ") and verdict.endswith("; 2 (candidate, check) pairs ran")
    tail = before[-3:]  # --candidate named: no other candidate is unavailable
    assert tail == [
        "backward_accuracy not checked for torch: backward checks are off",
        "    (--no-check-grad)",
        "dtypes bf16, fp16 not checked: not in the plan (--dtype fp32)",
    ], tail
    assert all(len(x) <= 80 for x in tail)


OTHER_BAD_NUMBERS = [
    (["bench", "--op", "logp", "--reps", "0"], "--reps: expected an integer >= 1, got 0"),
    (["bench", "--op", "logp", "--warmup", "-1"], "--warmup: expected an integer >= 0, got -1"),
    (["bench", "--op", "logp", "--batch", "-2"], "--batch: expected an integer >= 1, got -2"),
    (["diff", "a.json", "b.json", "--floor", "-1"], "--floor: expected a number >= 0, got -1"),
    (["diff", "a.json", "b.json", "--floor", "nan"], "--floor: expected a number >= 0, got nan"),
    (["report", "a.json", "--html-out", "r.html", "--baseline-factor", "0"],
     "--baseline-factor: expected a number >= 1, got 0"),
]  # fmt: skip


@pytest.mark.parametrize(
    "args,fragment",
    _quick_or_slow(
        OTHER_BAD_NUMBERS, {"bench --op logp --reps 0", "diff a.json b.json --floor nan"}
    ),
)
def test_every_numeric_option_out_of_range_is_one_line_and_exit_2(args, fragment, tmp_path):
    for name in ("a.json", "b.json"):  # valid reports: the number is what is wrong
        (tmp_path / name).write_text(json.dumps(_tiny_report()))
    p = kc(*args, cwd=tmp_path)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and fragment in lines[0], p.stderr


def _tiny_report() -> dict:
    from kernelcheck.report import to_json
    from kernelcheck.results import Report

    return json.loads(to_json(Report("logp", "1", "cpu")))


@pytest.mark.slow
def test_piped_output_fits_80_columns():
    """Not a terminal: every line of run, list, doctor and bench fits 80 columns; only a
    single unbreakable token (a library's path in doctor) may be longer."""
    runs = {
        "run": kc("run", "--op", "logp", "--candidate", "torch", *SMALL, "--checks",
                  "forward_accuracy,contract"),
        "list": kc("list"),
        "doctor": kc("doctor"),
        "bench": kc("bench", "--op", "logp", "--candidate", "torch", "--dtype", "fp32",
                    "--batch", "2", "--vocab", "33", "--reps", "2", "--warmup", "0"),
    }  # fmt: skip
    for name, p in runs.items():
        assert p.returncode == 0, (name, p.stderr)
        lines = p.stdout.splitlines()
        assert len(lines) > 3, (name, p.stdout)
        long = [x for x in lines if len(x) > 80 and len(x.split()) > 1]
        assert not long, (name, long)
    assert "worst: the largest error" in runs["run"].stdout  # the legend, wrapped
    assert "peak bandwidth: " in runs["bench"].stdout


@pytest.mark.slow
def test_with_a_baseline_the_last_line_is_the_verdict(tmp_path):
    """A run that passes but regressed against its baseline ends with REGRESSED, exit 1;
    the diff comes before it."""
    base = tmp_path / "base.json"
    args = ["run", "--op", "logp", "--candidate", "torch", *SMALL, "--checks",
            "forward_accuracy", "--no-check-grad"]  # fmt: skip
    assert kc(*args, "--json-out", str(base)).returncode == 0
    data = json.loads(base.read_text())
    for r in data["results"]:
        r["metrics"]["max_abs"] = 1e-12  # the baseline was far better
    base.write_text(json.dumps(data))
    p = kc(*args, "--baseline", str(base))
    assert p.returncode == 1, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[-1].startswith("REGRESSED: 1 pass"), lines[-3:]
    assert any(x.startswith("kernelcheck diff: REGRESSED") for x in lines[:-1])
    assert not any(x.startswith("PASSED") for x in lines)
