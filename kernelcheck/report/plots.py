"""The HTML report's plots: matplotlib figures as inline SVG text, from results' ``plots``.

matplotlib is the optional extra ``report``; it is imported here only, and only when a
plot is drawn, so a run never needs it. SVG text (``svg.fonttype = none``) keeps a plot
at ~10-30 kB and lets the browser draw the labels; a salt per plot keeps the SVG ids of
the plots of one page apart.
"""

from __future__ import annotations

import io
import re

from kernelcheck.errors import UsageError

INSTALL = "pip install 'kernelcheck[report]'  (from a checkout: pip install -e '.[report]')"

STATUS_COLOURS = {
    "pass": "#2e7d32",
    "fail": "#c62828",
    "error": "#8e24aa",
    "timeout": "#ef6c00",
    "crash": "#6a1b9a",
    "skip": "#9e9e9e",
}
_BAR, _TAIL, _LIMIT, _REF = "#1565c0", "#ef6c00", "#c62828", "#9e9e9e"


class PlottingUnavailable(UsageError):
    """matplotlib is not installed: the HTML report cannot draw its plots (exit 2)."""


def require() -> None:
    """Raise :class:`PlottingUnavailable`, with the install command, when matplotlib is
    missing: checked before a run or a render starts, not half-way."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlottingUnavailable(f"the HTML report needs matplotlib: {INSTALL}") from None


def _figure(width: float = 4.6, height: float = 2.5):
    require()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    ax = fig.add_subplot()
    ax.tick_params(labelsize=7)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig, ax


_ID_REFERENCE = re.compile(r'(\bid="|href="#|url\(#)')


def _svg(fig, salt: str) -> str:
    """The figure as an ``<svg>`` element for inline use: no XML prolog, no metadata, no
    namespace URLs (HTML's parser needs none), indentation dropped, and every id (and
    reference to one) prefixed by ``salt``: matplotlib names each figure's groups alike
    (``figure_1``, ``axes_1``), and ids must be unique in a page."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    text = re.sub(r'\s*xmlns(:xlink)?="[^"]*"', "", text)
    text = re.sub(r"\s*\n\s*", "\n", text)
    return _ID_REFERENCE.sub(lambda m: f"{m.group(1)}{salt}-", text)


def _legend(ax) -> None:
    """The legend beside the axes, never over the bars."""
    ax.legend(fontsize=6, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _log_floor(values: list[float]) -> float:
    """A positive bottom for a log axis under ``values`` (errors can be exactly 0)."""
    positive = [v for v in values if v and v > 0]
    return min(positive) / 4 if positive else 1e-12


def ulp_histogram(entry: dict, *, salt: str) -> str:
    """Element counts by log2 bucket of ULP distance; NaN/Inf apart, in red."""
    from kernelcheck.checks.metrics import NONFINITE_BUCKET, ulp_bucket_label

    ulp = entry["ulp"]
    counts = list(ulp["log2_counts"]) or [0]
    labels = [ulp_bucket_label(k) for k in range(len(counts))]
    colours = [_BAR] * len(counts)
    if ulp.get("nonfinite"):
        counts.append(ulp["nonfinite"])
        labels.append(ulp_bucket_label(NONFINITE_BUCKET))
        colours.append(_LIMIT)
    fig, ax = _figure()
    ax.bar(range(len(counts)), counts, color=colours, width=0.8)
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.5)
    ax.set_xticks(range(len(counts)), labels, rotation=60, fontsize=6, ha="right")
    ax.set_xlabel(f"distance in {ulp['unit']} steps (log2 buckets)", fontsize=7)
    ax.set_ylabel("elements", fontsize=7)
    ax.set_title(f"{entry['name']}: ULP error", fontsize=8)
    return _svg(fig, salt)


def column_errors(entry: dict, atol: float | None, *, salt: str) -> str:
    """The worst |error| per column bucket along the row; the columns past the last full
    bucket (the tail) in orange; the tolerance as a red line."""
    cols = entry["columns"]
    width, values = cols["width"], list(cols["max_abs"])
    starts = [k * width for k in range(len(values))]
    fig, ax = _figure()
    ax.bar(starts, values, width=width, align="edge", color=_BAR, label="bucket")
    if "tail_start" in cols:
        tail_width = cols["columns"] - cols["tail_start"]
        ax.bar(
            [cols["tail_start"]],
            [cols["tail_max_abs"]],
            width=max(tail_width, width / 4),
            align="edge",
            color=_TAIL,
            label=f"tail ({tail_width} col)",
        )
        values.append(cols["tail_max_abs"])
    if atol:
        ax.axhline(atol, color=_LIMIT, linewidth=0.8, linestyle="--", label=f"atol {atol:g}")
    ax.set_yscale("log")
    ax.set_ylim(bottom=_log_floor([*values, atol or 0]))
    ax.set_xlim(0, cols["columns"])
    ax.set_xlabel(f"column ({len(cols['max_abs'])} buckets of {width})", fontsize=7)
    ax.set_ylabel("max |cand - gold|", fontsize=7)
    ax.set_title(f"{entry['name']}: worst error by column", fontsize=8)
    _legend(ax)
    return _svg(fig, salt)


def distribution_errors(entry: dict, atol: float | None, *, salt: str) -> str:
    """The worst |error| per input distribution, the tolerance as a red line."""
    by = entry["by_distribution"]
    names, values = list(by), list(by.values())
    fig, ax = _figure()
    over = [bool(atol) and v > atol for v in values]
    ax.bar(names, values, color=[_LIMIT if o else _BAR for o in over], width=0.6)
    if atol:
        ax.axhline(atol, color=_LIMIT, linewidth=0.8, linestyle="--", label=f"atol {atol:g}")
        _legend(ax)
    ax.set_yscale("log")
    ax.set_ylim(bottom=_log_floor([*values, atol or 0]))
    ax.tick_params(axis="x", labelrotation=30)
    ax.set_ylabel("max |cand - gold|", fontsize=7)
    ax.set_title(f"{entry['name']}: worst error by distribution", fontsize=8)
    return _svg(fig, salt)


def precision(by_distribution: dict, *, salt: str) -> str:
    """Per distribution, the candidate's max error beside the honest fp32 reference's,
    and the limit (ratio x reference + floor) as a red tick."""
    names = list(by_distribution)
    cand = [by_distribution[n]["max_abs"] for n in names]
    ref = [by_distribution[n]["reference_max_abs"] for n in names]
    limit = [by_distribution[n]["limit"] for n in names]
    xs = range(len(names))
    fig, ax = _figure()
    ax.bar([x - 0.2 for x in xs], cand, width=0.4, color=_BAR, label="candidate")
    ax.bar([x + 0.2 for x in xs], ref, width=0.4, color=_REF, label="fp32 reference")
    ax.scatter(list(xs), limit, marker="_", s=300, color=_LIMIT, label="limit", zorder=3)
    ax.set_yscale("log")
    ax.set_ylim(bottom=_log_floor([*cand, *ref, *limit]))
    ax.set_xticks(list(xs), names, rotation=30, fontsize=7)
    ax.set_ylabel("max |error|", fontsize=7)
    ax.set_title("candidate vs fp32 reference error", fontsize=8)
    _legend(ax)
    return _svg(fig, salt)


def invariance_grid(grid: dict, *, salt: str) -> str:
    """Rows: layout x batch size; columns: position buckets in the batch. A cell is red
    by the share of its row placements whose bits differ from the row alone, green when
    none do, and gives the count that differs."""
    from matplotlib.colors import LinearSegmentedColormap

    rows = [(layout, row) for layout, batch_rows in grid.items() for row in batch_rows]
    ncols = max((len(r["compared"]) for _, r in rows), default=1)
    fig, ax = _figure(4.6, 0.9 + 0.3 * max(len(rows), 2))
    cmap = LinearSegmentedColormap.from_list("inv", ["#ef9a9a", "#b71c1c"])  # any: red
    for y, (_, row) in enumerate(rows):
        bad = row.get("mismatched") or [0] * len(row["compared"])
        for x, (n, m) in enumerate(zip(row["compared"], bad)):
            colour = cmap(m / n) if m else "#c8e6c9"
            ax.add_patch(_rectangle((x, y), colour))
            if m:
                ax.text(x + 0.5, y + 0.5, str(m), ha="center", va="center", fontsize=6, color="w")
    ax.set_xlim(0, ncols)
    ax.set_ylim(len(rows), 0)
    short = {layout: layout.replace("batches of", "dealt").replace(" misaligned", ", misal.")
             for layout, _ in rows}  # fmt: skip
    ax.set_yticks(
        [y + 0.5 for y in range(len(rows))],
        [f"{short[layout]}: {row['batch']}" for layout, row in rows],
        fontsize=6,
    )
    ax.set_xticks([])
    ax.set_xlabel("position in the batch (buckets, first to last)", fontsize=7)
    ax.set_title("rows that differ from the same row alone", fontsize=8)
    return _svg(fig, salt)


def _rectangle(xy, colour):
    from matplotlib.patches import Rectangle

    return Rectangle(xy, 1, 1, facecolor=colour, edgecolor="white", linewidth=0.5)


def precision_overview(
    points: list[tuple[str, str, float, bool]], ratio: float, *, salt: str
) -> str:
    """``forward_precision``'s ratio to the reference per candidate (x) and dtype (marker),
    every case: how candidates and dtypes compare at a glance. A point whose candidate gave
    NaN/Inf (its ratio is over the finite elements only) is a red cross at the top."""
    cands = list(dict.fromkeys(p[0] for p in points))
    dtypes = list(dict.fromkeys(p[1] for p in points))
    finite = [max(r, 1e-3) for _, _, r, bad in points if not bad]
    top = max([*finite, ratio]) * 3
    fig, ax = _figure(6.0, 2.6)
    markers = "os^Dv"

    def x(cand: str, dtype: str) -> float:
        return cands.index(cand) + 0.12 * (dtypes.index(dtype) - (len(dtypes) - 1) / 2)

    for k, dt in enumerate(dtypes):
        mine = [(c, r) for c, d, r, bad in points if d == dt and not bad]
        ax.scatter([x(c, dt) for c, _ in mine], [max(r, 1e-3) for _, r in mine],
                   marker=markers[k % len(markers)], s=18, label=dt, alpha=0.8)  # fmt: skip
    bad = [(c, d) for c, d, _, b in points if b]
    if bad:
        ax.scatter([x(c, d) for c, d in bad], [top] * len(bad), marker="x", color=_LIMIT, s=24,
                   label="NaN/Inf")  # fmt: skip
    ax.axhline(ratio, color=_LIMIT, linewidth=0.8, linestyle="--", label=f"ratio {ratio:g}")
    ax.set_yscale("log")
    ax.set_xticks(range(len(cands)), cands, rotation=20, fontsize=7, ha="right")
    ax.set_ylabel("max error / reference's", fontsize=7)
    ax.set_title("forward_precision: error ratio to the fp32 reference", fontsize=8)
    _legend(ax)
    return _svg(fig, salt)
