"""The report: HTML (self-contained, PNGs embedded as base64) and Markdown (PNG files beside it).

Contents:

* per pipeline: mean and standard deviation of QL and CQL over seeds, std ratio, seed budget;
* per pair: pairwise accuracy of QL and CQL with bootstrap intervals (direction by QL);
* plots: the spread of QL and CQL across seeds for each pipeline, the monthly bias
  ``c_k`` over time (mean over seeds, band = min..max), monthly QL and CQL;
* the METHOD 4 caveat: CQL cannot see an improvement that is itself a calibration
  improvement.

Computing and drawing are separate: :func:`make_figures` (from
:mod:`rolling_calib.reporting.figures`) returns matplotlib figures, :func:`render_markdown` /
:func:`render_html` return text, and :func:`write_report` saves everything atomically.

Example
-------
>>> import warnings
>>> from rolling_calib.analysis.scoring import score_store
>>> from rolling_calib.analysis.comparison import compare_store
>>> scores = score_store(example_store, progress=False)
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")    # the example store records no library versions
...     paths = write_report(scores, compare_store(scores, n_boot=200), example_store / "report")
>>> paths["html"].name, paths["html"].read_text().startswith("<!DOCTYPE html>")
('report.html', True)
"""

from __future__ import annotations

import base64
import html
import io
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from rolling_calib.analysis.comparison import StoreComparison
from rolling_calib.analysis.scoring import StoreScores
from rolling_calib.core.atomic import atomic_write_bytes, atomic_write_text
from rolling_calib.reporting.figures import make_figures

__all__ = ["CAVEAT", "make_figures", "render_markdown", "render_html", "write_report"]

CAVEAT = (
    "Known limitation (METHOD 4): the calibrated loss removes each period's output bias before "
    "scoring, so it cannot see an improvement that *is* a calibration improvement. If pipeline B's "
    "only advantage is a better-calibrated output bias, CQL will rank A and B as equal (or reversed); "
    "check the plain QL column and the monthly bias plot before trusting a CQL ranking in that case."
)


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def _num(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return f"{float(value):.{digits}f}"


def _tables(scores: StoreScores, comparison: StoreComparison) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    head1 = ["pipeline", "runs", "QL mean", "QL std", "QL 2..K mean", "QL 2..K std", "CQL mean", "CQL std",
             "std ratio CQL / QL 2..K", "seed budget"]
    rows1 = [
        [
            r["pipeline"], _num(r["runs"]), _num(r["ql_mean"]), _num(r["ql_std"]), _num(r["ql_scored_mean"]),
            _num(r["ql_scored_std"]), _num(r["cql_mean"]), _num(r["cql_std"]), _num(r["std_ratio"], 3),
            _num(r["seed_budget"], 1),
        ]
        for r in comparison.summary.to_dict(orient="records")
    ]
    head2 = ["better (by QL)", "worse", "QL gap", "Acc QL [CI]", "Acc QL periods 2..K [CI]", "Acc CQL [CI]"]
    rows2 = []
    for p in comparison.pairs:
        cells = [p.better + (" (tie)" if p.tie else ""), p.worse, _num(p.ground_truth_gap)]
        for m in ("ql", "ql_scored", "cql"):
            a = p.accuracies[m]
            cells.append(f"{a.accuracy:.3f} [{a.ci_low:.3f}, {a.ci_high:.3f}]")
        rows2.append(cells)
    return head1, rows1, head2, rows2


def _details(scores: StoreScores) -> tuple[list[str], list[list[str]], str]:
    """Schedule table (from the first scored pipeline) and a provenance line, read from the manifest."""
    from rolling_calib.execution import store as st

    try:
        manifest = st.read_manifest(scores.store)
    except st.NoManifestError as exc:  # a corrupt manifest raises: only an absent one is reported
        warnings.warn(f"report without provenance: {exc}", stacklevel=2)
        return [], [], f"**Warning: no provenance** ({exc}): schedule, config hashes and versions are unknown."
    entry = manifest["pipelines"].get(scores.pipelines[0], {}) if scores.pipelines else {}
    if not entry.get("windows") or not manifest.get("versions"):
        missing = ", ".join(n for n, ok in (("schedule", entry.get("windows")), ("versions", manifest.get("versions")))
                            if not ok)
        warnings.warn(f"report: the manifest of {scores.store} records no {missing}", stacklevel=2)
    head = ["window", "train", "valid", "test"]
    rows = []
    for w in entry.get("windows", []):
        def seg(v):
            return "none" if v is None else f"{v[0]} .. {v[1]}"

        rows.append([str(w["index"]), seg(w.get("train")), seg(w.get("valid")), seg(w.get("test"))])
    versions = manifest.get("versions", {})
    hashes = ", ".join(f"{name} {e.get('config_hash')}" for name, e in manifest["pipelines"].items() if name in scores.pipelines)
    line = (
        f"Mode: {entry.get('mode', '?')}. Config hashes: {hashes}. Versions: "
        + ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))
        + "."
    )
    return head, rows, line


def _calibration_words(scores: StoreScores) -> str:
    """What CQL does under the scores' rule, in words."""
    cal = scores.calibration
    scored = ("scores every period (each window's bias comes from its own validation predictions)"
              if cal.source == "validation" else "scores periods 2..K (period 1 only supplies the first bias)")
    return f"CQL shifts each period's predictions by a bias fitted elsewhere ({cal.describe()}) and {scored}"


def _intro(scores: StoreScores, comparison: StoreComparison) -> str:
    n_runs = len(scores.runs)
    return (
        f"Store `{scores.store}`: {n_runs} run(s) of {len(scores.pipelines)} pipeline(s), scored against the "
        f"{scores.label.describe()}. QL is the plain quadratic loss of that label ({scores.label.loss_unit}) over the "
        f"whole evaluation span; {_calibration_words(scores)}. Pairwise accuracy = share of (seed of A, seed of B) pairs "
        f"ranked like the ground truth (QL means); intervals: {comparison.confidence:.0%} percentile bootstrap "
        f"over seeds, {comparison.n_boot} resamples, seed {comparison.seed}. "
        f"QL 2..K is the plain loss on the rows CQL scores; the std ratio and the seed budget (runs of QL 2..K "
        f"needed to reach the standard error CQL has with the runs at hand) compare those same rows."
    )


def _verdicts(diagnosis: Any) -> list[str]:
    """One line per diagnosed pipeline: can a bias correction help its seed spread, and did CQL?"""
    if diagnosis is None:
        return []
    return [f"{d.pipeline}: {d.verdict}" for d in diagnosis.pipelines]


def render_markdown(scores: StoreScores, comparison: StoreComparison, *, images: dict[str, str],
                    diagnosis: Any = None) -> str:
    """Markdown report; ``images`` maps figure name -> relative PNG path; ``diagnosis`` adds the verdicts."""
    head1, rows1, head2, rows2 = _tables(scores, comparison)

    def table(head: list[str], rows: list[list[str]]) -> list[str]:
        return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]

    lines = ["# rolling-calib report", "", _intro(scores, comparison), "", "## Pipelines", ""]
    lines += table(head1, rows1)
    if rows2:
        lines += ["", "## Pairs", ""] + table(head2, rows2)
    if _verdicts(diagnosis):
        lines += ["", "## Can calibration help here?", ""] + [f"- {v}" for v in _verdicts(diagnosis)]
        lines += ["", "(`rolling-calib diagnose STORE` splits each pipeline's seed variance into bias and spread.)"]
    if comparison.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in comparison.notes]
    lines += ["", "## Spread across seeds", "", f"![QL and CQL across seeds]({images['spread']})"]
    lines += ["", "## Monthly bias c_k", "", f"![bias over time]({images['bias']})"]
    lines += ["", "## Monthly QL and CQL", "", f"![monthly QL and CQL]({images['monthly']})"]
    lines += ["", "## Caveat", "", CAVEAT]
    head3, rows3, provenance = _details(scores)
    if rows3:
        lines += ["", "## Schedule and provenance", ""] + table(head3, rows3) + ["", provenance]
    if scores.incomplete:
        lines += ["", "## Incomplete runs (left out)", ""] + [f"- {s}" for s in scores.incomplete]
    return "\n".join(lines) + "\n"


def render_html(scores: StoreScores, comparison: StoreComparison, *, pngs: dict[str, bytes],
                diagnosis: Any = None) -> str:
    """Self-contained HTML report (figures embedded as base64 PNG); ``diagnosis`` adds the verdicts."""
    head1, rows1, head2, rows2 = _tables(scores, comparison)
    esc = html.escape

    def table(head: list[str], rows: list[list[str]]) -> str:
        th = "".join(f"<th>{esc(h)}</th>" for h in head)
        trs = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
        return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"

    def img(name: str, alt: str) -> str:
        data = base64.b64encode(pngs[name]).decode("ascii")
        return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">'

    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>rolling-calib report</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}img{max-width:100%}.caveat{background:#fff4e0;padding:.8em}</style>",
        "</head><body><h1>rolling-calib report</h1>",
        f"<p>{esc(_intro(scores, comparison))}</p>",
        "<h2>Pipelines</h2>", table(head1, rows1),
    ]
    if rows2:
        parts += ["<h2>Pairs</h2>", table(head2, rows2)]
    if _verdicts(diagnosis):
        parts += ["<h2>Can calibration help here?</h2><ul>"] + [f"<li>{esc(v)}</li>" for v in _verdicts(diagnosis)]
        parts += ["</ul><p>(<code>rolling-calib diagnose STORE</code> splits each pipeline's seed variance "
                  "into bias and spread.)</p>"]
    if comparison.notes:
        parts += ["<h2>Notes</h2><ul>"] + [f"<li>{esc(n)}</li>" for n in comparison.notes] + ["</ul>"]
    parts += [
        "<h2>Spread across seeds</h2>", img("spread", "QL and CQL across seeds"),
        "<h2>Monthly bias c_k</h2>", img("bias", "bias over time"),
        "<h2>Monthly QL and CQL</h2>", img("monthly", "monthly QL and CQL"),
        f"<h2>Caveat</h2><p class='caveat'>{esc(CAVEAT)}</p>",
    ]
    head3, rows3, provenance = _details(scores)
    if rows3:
        parts += ["<h2>Schedule and provenance</h2>", table(head3, rows3), f"<p>{esc(provenance)}</p>"]
    if scores.incomplete:
        parts += ["<h2>Incomplete runs (left out)</h2><ul>"] + [f"<li>{esc(s)}</li>" for s in scores.incomplete] + ["</ul>"]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(scores: StoreScores, comparison: StoreComparison, out_dir: str | Path, *,
                 diagnosis: Any = None) -> dict[str, Path]:
    """Write ``report.html``, ``report.md``, the PNGs and the tables (CSV) into ``out_dir``.

    ``diagnosis`` (:func:`rolling_calib.analysis.diagnostics.diagnose_store`) adds each pipeline's verdict:
    how much of its seed spread a bias correction can remove, and how much CQL removed.

    Returns
    -------
    dict
        ``{"html", "markdown", "runs_csv", "periods_csv", "<figure>_png"...}`` -> path.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pngs = {name: _png(fig) for name, fig in make_figures(scores).items()}
    paths: dict[str, Path] = {}
    for name, data in pngs.items():
        paths[f"{name}_png"] = atomic_write_bytes(out / f"{name}.png", data)
    images = {n: f"{n}.png" for n in pngs}
    paths["markdown"] = atomic_write_text(out / "report.md",
                                          render_markdown(scores, comparison, images=images, diagnosis=diagnosis))
    paths["html"] = atomic_write_text(out / "report.html", render_html(scores, comparison, pngs=pngs, diagnosis=diagnosis))
    paths["runs_csv"] = atomic_write_text(out / "runs.csv", scores.runs.to_csv(index=False))
    paths["periods_csv"] = atomic_write_text(out / "periods.csv", scores.periods.to_csv(index=False))
    paths["summary_csv"] = atomic_write_text(out / "pipelines.csv", comparison.summary.to_csv(index=False))
    return paths
