"""The ingest report: counts per symbol and kind, and every row dropped, changed or moved.

Written with ``--report FILE``: ``FILE.json`` (machine-readable, everything), ``FILE.md``
(human-readable, everything), or both when the suffix is neither (``FILE.json`` and
``FILE.md``). Lines are 1-based physical lines (CSV header = line 1; Parquet: row number).

Example
-------
>>> import polars as pl
>>> from data_prep.validate import ISSUE_SCHEMA
>>> r = IngestReport(mode="repair", files=[{"path": "X.csv", "rows": 3, "symbols": ["X"]}],
...                  issues=pl.DataFrame(schema=ISSUE_SCHEMA), rows_in={"X": 3}, rows_out={"X": 3})
>>> r.totals()
{}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from data_prep.qlib_store import atomic_write_text
from data_prep.validate import CELL_KINDS, ERROR_KINDS, KIND_ACTIONS, WARNING_KINDS

__all__ = ["IngestReport", "write_report", "UNITS"]

_KIND_ORDER = ERROR_KINDS + WARNING_KINDS

#: what one count of a kind is (every other kind counts rows)
UNITS: dict[str, str] = {
    **{k: "cells" for k in CELL_KINDS},
    "missing_minutes": "minutes",
    "missing_session": "sessions",
    "stale_prices": "runs",
}
COUNT_NOTE = (
    "missing_value, unparseable_value, non_finite_value and non_positive_price count cells (one per field of a row; "
    "rows_by_kind gives the rows); missing_minutes counts minutes, missing_session sessions, stale_prices runs; "
    "every other kind counts rows."
)


@dataclass
class IngestReport:
    """Everything the validation found, and what was done about it.

    Attributes
    ----------
    mode : str
        ``validate``, ``strict`` or ``repair``.
    files : list of dict
        ``path``, ``rows``, ``symbols`` per file read.
    issues : polars.DataFrame
        One row per anomaly: ``_file, _line, symbol, kind, field, expected, found, action, new``
        (``new``: the value written where ``action`` is ``changed``, else empty).
    rows_in, rows_out : dict
        Rows read and bars written per symbol.
    missing_minutes : dict
        ``{symbol: {session date: missing minutes}}`` over each symbol's span.
    calendar : dict
        The store calendar's span.
    notes : list of str
        Decisions applied (16:00 policy, vwap derivation, adjustments ...).
    hints : list of str
        Likely causes worth checking (e.g. the time zone, when most of a file's bars fall
        outside the session; a file name whose symbol carries an interval tag).
    symbols_from_names : list of str
        Where symbols were taken from file names (no symbol column, no ``--symbol``): one line.
    """

    mode: str
    files: list[dict]
    issues: pl.DataFrame
    rows_in: dict[str, int]
    rows_out: dict[str, int]
    missing_minutes: dict[str, dict[str, int]] = field(default_factory=dict)
    calendar: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    symbols_from_names: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ counts
    def counts(self) -> dict[str, dict[str, int]]:
        """``{symbol: {kind: count}}``; ``missing_minutes`` counts minutes."""
        out: dict[str, dict[str, int]] = {s: {} for s in sorted(set(self.rows_in) | set(self.missing_minutes))}
        if self.issues.height:
            agg = self.issues.group_by(["symbol", "kind"]).len()
            for sym, kind, n in agg.iter_rows():
                out.setdefault(sym, {})[kind] = int(n)
        for sym, per_day in self.missing_minutes.items():
            if per_day:
                out.setdefault(sym, {})["missing_minutes"] = int(sum(per_day.values()))
        return {s: dict(sorted(k.items(), key=lambda kv: _KIND_ORDER.index(kv[0]))) for s, k in out.items()}

    def totals(self) -> dict[str, int]:
        """``{kind: count}`` over all symbols, in the documented kind order."""
        tot: dict[str, int] = {}
        for per in self.counts().values():
            for k, n in per.items():
                tot[k] = tot.get(k, 0) + n
        return dict(sorted(tot.items(), key=lambda kv: _KIND_ORDER.index(kv[0])))

    def rows_by_kind(self) -> dict[str, int]:
        """``{kind: distinct rows}``: for the cell kinds (:data:`UNITS`) fewer than their count."""
        if not self.issues.height:
            return {}
        d = self.issues.unique(["kind", "symbol", "_file", "_line"]).group_by("kind").len()
        return dict(sorted(((k, int(n)) for k, n in d.iter_rows()), key=lambda kv: _KIND_ORDER.index(kv[0])))

    def error_count(self) -> int:
        """Number of error-kind anomalies (what the default mode refuses on)."""
        return sum(n for k, n in self.totals().items() if k in ERROR_KINDS)

    def rows_dropped(self) -> dict[str, int]:
        """Distinct rows dropped per symbol."""
        if not self.issues.height:
            return {}
        d = self.issues.filter(pl.col("action") == "dropped").unique(["symbol", "_file", "_line"])
        return {s: int(n) for s, n in d.group_by("symbol").len().sort("symbol").iter_rows()}

    def rows_changed(self) -> dict[str, int]:
        """Distinct rows whose values were changed per symbol."""
        if not self.issues.height:
            return {}
        d = self.issues.filter(pl.col("action") == "changed").unique(["symbol", "_file", "_line"])
        return {s: int(n) for s, n in d.group_by("symbol").len().sort("symbol").iter_rows()}

    def _with_paths(self) -> pl.DataFrame:
        paths = [f["path"] for f in self.files]
        return self.issues.with_columns(
            pl.col("_file").replace_strict(list(range(len(paths))), paths, return_dtype=pl.String, default="?").alias("file")
        ).select("file", pl.col("_line").alias("line"), "symbol", "kind", "field", "expected", "found", "action", "new")

    # ------------------------------------------------------------------ output
    def to_dict(self) -> dict:
        """JSON-ready dict with the summary, per-symbol counts and every issue row."""
        return {
            "mode": self.mode,
            "files": self.files,
            "calendar": self.calendar,
            "notes": self.notes,
            "hints": self.hints,
            "symbols_from_names": self.symbols_from_names,
            "repair_actions": {k: KIND_ACTIONS[k] for k in _KIND_ORDER},
            "units": {k: UNITS.get(k, "rows") for k in _KIND_ORDER},
            "totals": self.totals(),
            "rows_by_kind": self.rows_by_kind(),
            "counts": self.counts(),
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "rows_dropped": self.rows_dropped(),
            "rows_changed": self.rows_changed(),
            "missing_minutes": self.missing_minutes,
            "issues": self._with_paths().to_dicts(),
        }

    def summary_text(self) -> str:
        """A few lines: totals per kind and rows dropped/changed."""
        tot = self.totals()
        lines = [f"ingest report ({self.mode}): {len(self.files)} files, {sum(self.rows_in.values()):,} rows read"]
        if not tot:
            lines.append("  no anomalies")
        acted = (
            dict(self.issues.group_by("kind").agg(pl.col("action").unique().sort()).iter_rows())
            if self.issues.height else {}
        )
        rows = self.rows_by_kind()
        for kind, n in tot.items():
            sev = "warning" if kind in WARNING_KINDS else "error"
            action = "/".join(acted.get(kind, [KIND_ACTIONS[kind]]))
            syms = sum(1 for per in self.counts().values() if kind in per)
            unit = UNITS.get(kind, "rows")
            what = f"{n:>8,} {unit}" + (f" in {rows.get(kind, 0):,} rows" if unit == "cells" else "")
            lines.append(f"  {kind:<24} {what:<30} of {syms:>3} symbols  [{sev}; repair: {action}]")
        lines += [f"  {line}" for line in self.symbols_from_names]
        lines += [f"  hint: {h}" for h in self.hints]
        lines.append(
            f"  rows dropped {sum(self.rows_dropped().values()):,}, rows changed {sum(self.rows_changed().values()):,}, "
            f"bars written {sum(self.rows_out.values()):,}"
        )
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """Full Markdown report: summary, counts per symbol and kind, missing minutes, every issue row."""
        counts = self.counts()
        kinds = list(self.totals())
        out = ["# Ingest report", "", f"Mode: `{self.mode}`", ""]
        if self.calendar:
            out += [f"Store calendar: {self.calendar.get('first')} .. {self.calendar.get('last')}, "
                    f"{self.calendar.get('sessions')} sessions, {self.calendar.get('bars')} bars", ""]
        out += ["## Decisions applied", ""] + [f"- {n}" for n in self.notes + self.symbols_from_names] + [""]
        out += ["## Files", "", "| file | rows | symbols |", "|---|---:|---|"]
        out += [f"| {f['path']} | {f['rows']} | {', '.join(f['symbols'])} |" for f in self.files]
        out += ["", "## Summary", "", "```", self.summary_text(), "```", ""]
        if self.hints:
            out += ["## Hints", ""] + [f"- {h}" for h in self.hints] + [""]
        out += ["## Counts per symbol and kind", "", COUNT_NOTE, ""]
        if kinds:
            out += ["| symbol | rows in | bars written | " + " | ".join(kinds) + " |",
                    "|---|---:|---:|" + "---:|" * len(kinds)]
            for sym, per in counts.items():
                out.append(f"| {sym} | {self.rows_in.get(sym, 0)} | {self.rows_out.get(sym, 0)} | "
                           + " | ".join(str(per.get(k, 0)) for k in kinds) + " |")
        else:
            out.append("No anomalies.")
        out += ["", "## Missing minutes per session", ""]
        any_missing = False
        for sym, per_day in self.missing_minutes.items():
            if per_day:
                any_missing = True
                days = ", ".join(f"{d}: {n}" for d, n in per_day.items())
                out.append(f"- **{sym}** ({sum(per_day.values())} minutes in {len(per_day)} sessions): {days}")
        if not any_missing:
            out.append("None.")
        out += ["", "## Every row dropped, changed or moved, and every warning", ""]
        rows = self._with_paths()
        if rows.height:
            out += ["| file | line | symbol | kind | field | expected | found | action | new |",
                    "|---|---:|---|---|---|---|---|---|---|"]
            for r in rows.iter_rows():
                out.append("| " + " | ".join(("" if v is None else str(v)).replace("|", "\\|") for v in r) + " |")
        else:
            out.append("None.")
        return "\n".join(out) + "\n"


def write_report(report: IngestReport, path: str | Path) -> list[Path]:
    """Write the report as JSON (``.json``), Markdown (``.md``) or both (other suffixes); atomic.

    Returns
    -------
    list of pathlib.Path
        The files written.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    targets = (
        [path] if suffix in (".json", ".md") else [path.with_name(path.name + ".json"), path.with_name(path.name + ".md")]
    )
    for t in targets:
        if t.suffix.lower() == ".json":
            atomic_write_text(t, json.dumps(report.to_dict(), indent=1, default=str) + "\n")
        else:
            atomic_write_text(t, report.to_markdown())
    return targets
