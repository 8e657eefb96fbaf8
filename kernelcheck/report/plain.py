"""The old harness's line format, so existing log parsers keep working.

    suite=logp passed=True pass_rate=1.0000
    candidate=torch-logp backend=torch passed=True pass_rate=1.0000
      case=logp-torch.bfloat16-2x16x257 output=0 shape=(2, 16) dtype=torch.float32 max_abs=...

Accuracy results keep the old ``output=`` lines (the gradient line reads
``output=1 gradient:logits``); the other checks follow as ``check=`` lines, which old
parsers skip. The report ends with what was not checked and the verdict line the table
ends with too (``PASSED: ...; 16 (candidate, check) pairs ran``).
"""

from __future__ import annotations

from collections import defaultdict

from kernelcheck import dtypes
from kernelcheck.report.summary import not_checked_lines, verdict_rest, verdict_word
from kernelcheck.results import Report
from kernelcheck.spec.model import OpSpec


def _rate(results) -> tuple[bool, float]:
    ran = [r for r in results if r.status != "skip"]
    passed = sum(r.status == "pass" for r in ran)
    return passed == len(ran) and bool(ran), (passed / len(ran) if ran else 0.0)


def _case_name(op: str, dtype: str, shape: dict) -> str:
    return f"{op}-{dtypes.torch_dtype(dtype)}-{'x'.join(str(v) for v in shape.values())}"


def _dim_shape(dims: tuple[str, ...], shape: dict) -> tuple[int, ...]:
    return tuple(shape[d] for d in dims if d in shape)


def to_plain(
    report: Report,
    op: OpSpec,
    notes: list[str] | None = None,
    regressed: bool = False,
    unwritten: bool = False,
) -> str:
    """The old harness's lines, then ``notes`` (the shrink results, a baseline's diff),
    what was not checked (wrapped at 80 columns: this format is for logs) and the
    verdict, last (``regressed``: against a baseline)."""
    lines = []
    ok, rate = _rate(report.results)
    lines.append(f"suite={report.op} passed={ok and report.passed} pass_rate={rate:.4f}")
    by_cand = defaultdict(list)
    for r in report.results:
        by_cand[r.candidate].append(r)
    for cand, results in by_cand.items():
        ok, rate = _rate(results)
        lines.append(
            f"candidate={cand}-{report.op} backend={cand} passed={ok} pass_rate={rate:.4f}"
        )
        for r in results:
            name = _case_name(r.op, r.dtype, r.shape)
            m = r.metrics
            if r.check in ("forward_accuracy", "backward_accuracy") and r.status in (
                "pass",
                "fail",
            ):
                tol = r.tolerance or {}
                if r.check == "forward_accuracy":
                    out = op.outputs[0]
                    index, label = 0, ""
                    shape = _dim_shape(out.shape, r.shape)
                    dtype = dtypes.FIXED_DTYPES.get(out.dtype, dtypes.torch_dtype(r.dtype))
                else:
                    inp = op.input(op.grad_inputs[0])
                    index, label = len(op.outputs), f" gradient:{inp.name}"
                    shape = _dim_shape(inp.shape, r.shape)
                    dtype = dtypes.torch_dtype(r.dtype)
                lines.append(
                    f"  case={name} output={index}{label} shape={shape} dtype={dtype}"
                    f" max_abs={m.get('max_abs', 0.0):.8e} mean_abs={m.get('mean_abs', 0.0):.8e}"
                    f" max_rel={m.get('max_rel', 0.0):.8e}"
                    + (f" nonfinite={m['n_nonfinite']}" if m.get("n_nonfinite") else "")
                    + f" tol=(atol={tol.get('atol', 0.0):.3e}, rtol={tol.get('rtol', 0.0):.3e})"
                    f" passed={r.status == 'pass'}"
                )
            else:
                extra = " ".join(
                    f"{k}={v:.8e}" if isinstance(v, float) else f"{k}={v}" for k, v in m.items()
                )
                lines.append(
                    f"  case={name} check={r.check} status={r.status} passed={r.status == 'pass'}"
                    + (f" {extra}" if extra else "")
                )
            if r.status not in ("pass", "skip"):
                lines.append(f"    reason: {r.message}")
                lines.append(f"    repro: {r.repro}")
    for cand, reason in report.unavailable.items():
        lines.append(f"candidate={cand}-{report.op} backend={cand} unavailable: {reason}")
    if report.interrupted:
        lines.append(f"interrupted={report.interrupted} not_run={len(report.not_run)}")
    lines += notes or []
    lines += not_checked_lines(report)
    lines.append(verdict_word(report, regressed, unwritten) + verdict_rest(report, unwritten))
    return "\n".join(lines) + "\n"
