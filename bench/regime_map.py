"""Regime map: where, in this product's domain, does calibration help? (issue 21; docs/evidence.md)

Runs a grid of settings, each a real store of two or three pipelines x >= 8 seeds, and reports per cell
(setting x label scored x compared pair):

* the CQL / QL seed std ratio per pipeline, with a 95% bootstrap interval over seeds;
* the pairwise accuracy of QL and CQL against the split-seed truth (direction by QL on the held-out half
  of the seeds; mean over 200 random halves, with the 2.5% and 97.5% quantiles over the halves);
* the verdicts of QL and CQL (seeds and blocks of market time) and the guards that fired;
* IC of both pipelines, and whether the diagnosis says calibration helps.

Cells (``--list`` prints them): the minute synthetic market with our RollingLSTM (label normalisation none /
CSZScoreNorm / CSRankNorm x epochs 1, 2, 5), the source's settings of ``workflows/source/`` (Qlib's
LSTM-Alpha360 on the real daily bars, trained on CSRankNorm or raw labels; our minute LSTM with 6-month
fine-tunes, raw or CSRankNorm labels), and the minute market with a persistent signal the models learn
(``persistent_lstm``: weight decay, hidden size, layers and epochs against one base); every store scored against
the raw and the learned label.

Usage (from the repository root; runs are resumable, so a killed map re-runs only what is missing)::

    python bench/regime_map.py --workers 1                     # train what is missing, analyse, write
    python bench/regime_map.py --only minute_none_e1 --no-run   # analyse one cell
    python bench/regime_map.py --list

Writes ``bench_out/evidence/regime_map.json`` and ``regime_map.md``, and with ``--doc docs/evidence.md``
the table between the markers ``<!-- regime-map:begin -->`` and ``<!-- regime-map:end -->`` of that file (and the
source table, the compute table there, and the source table in ``workflows/source/README.md``).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench_out" / "evidence"
BEGIN, END = "<!-- regime-map:begin -->", "<!-- regime-map:end -->"
SOURCE_README = REPO / "workflows" / "source" / "README.md"


@dataclass(frozen=True)
class Cell:
    """One training setting: a workflow file, its overrides, and what it stands for."""

    name: str
    config: str
    sets: tuple[str, ...] = ()
    frequency: str = "minute (synthetic)"
    model: str = "our LSTM"
    normalisation: str = "none"  # the learn processor of the label
    epochs: str = ""
    data: str = "minute"   # which store it reads: minute (bench_out/evidence/qlib_minute) or daily
    notes: tuple[str, ...] = field(default=())


def _epochs(e: int) -> tuple[str, ...]:
    return (f"task.model.kwargs.n_epochs={e}", f"task.model.kwargs.finetune_epochs={e}",
            f"task.model.kwargs.early_stop={e}")


CELLS: list[Cell] = [
    *(Cell(f"minute_{norm}_e{e}", f"workflows/evidence/minute_{norm}.yaml", _epochs(e), normalisation=label,
           epochs=str(e))
      for norm, label in (("none", "none"), ("cszscore", "CSZScoreNorm"), ("csrank", "CSRankNorm")) for e in (1, 2, 5)),
    # where the theory predicts a gain: one epoch, the label learned as it is (no standardisation), so every
    # seed learns the label's level through its own output bias; and a 10x learning rate on top (a volatile bias)
    Cell("minute_none_e1_noscale", "workflows/evidence/minute_none.yaml",
         (*_epochs(1), "task.model.kwargs.label_scaling=none"), epochs="1", notes=("label not standardised",)),
    Cell("minute_none_e1_noscale_lr", "workflows/evidence/minute_none.yaml",
         (*_epochs(1), "task.model.kwargs.label_scaling=none", "task.model.kwargs.lr=0.01"), epochs="1",
         notes=("label not standardised", "lr 1e-2")),
    Cell("source_minute", "workflows/source/minute_lstm.yaml", epochs="3 (+1 per fine-tune)",
         notes=("6-month fine-tunes",)),
    Cell("source_minute_csrank", "workflows/source/minute_lstm_csrank.yaml", normalisation="CSRankNorm",
         epochs="3 (+1 per fine-tune)", notes=("6-month fine-tunes",)),
    Cell("source_daily", "workflows/source/lstm_alpha360.yaml", frequency="daily (real)", model="Qlib LSTM (Alpha360)",
         normalisation="CSRankNorm", epochs="5", data="daily", notes=("Qlib's benchmark file",)),
    Cell("source_daily_raw", "workflows/source/lstm_alpha360_rawlabel.yaml", frequency="daily (real)",
         model="Qlib LSTM (Alpha360)", normalisation="none", epochs="5", data="daily"),
    # the same store with seeds 10..19 added (a copy of source_daily re-run with 20 seeds: its first 60 units are
    # source_daily's): does the layers 3 vs 2 lead on the learned label hold with twice the seeds?
    Cell("source_daily_s20", "workflows/source/lstm_alpha360.yaml", ("rolling.seeds=20",), frequency="daily (real)",
         model="Qlib LSTM (Alpha360)", normalisation="CSRankNorm", epochs="5", data="daily",
         notes=("Qlib's benchmark file", "20 seeds")),
    # where the models have skill (issue 28): the minute market with a persistent predictable component
    # (oracle IC about 0.11), the source's families (weight decay, hidden size, layers, epochs) against one base,
    # 6-month fine-tunes, 10 seeds
    Cell("persistent_lstm", "workflows/evidence/persistent_lstm.yaml", frequency="minute (synthetic, persistent signal)",
         epochs="3 (+1 per fine-tune)", data="persistent",
         notes=("6-month fine-tunes", "momentum-state oracle IC 0.11, not a ceiling")),
]


def _run(cell: Cell, store: Path, *, workers: int, daily: Path, minute: Path, persistent: Path) -> float:
    """Train what is missing of ``cell`` into ``store`` (rolling-calib run); returns the wall seconds."""
    sets = list(cell.sets)
    sets.append(f"qlib_init.provider_uri.day={daily}" if cell.data == "daily" else
                f"qlib_init.provider_uri.1min={persistent if cell.data == 'persistent' else minute}")
    cmd = [sys.executable, "-m", "rolling_calib.cli", "run", cell.config, "--store", str(store), "--workers",
           str(workers), "--no-tracking", *(a for s in sets for a in ("--set", s))]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, check=True)
    return time.perf_counter() - t0


def _ratio(diagnosis, name: str) -> dict:
    d = diagnosis.of(name)
    r = d.std_ratio
    return {"ratio": r.ratio, "ci_low": r.ci_low, "ci_high": r.ci_high, "helps": d.assessment.helps,
            "headline": d.assessment.headline}


def analyse(cell: Cell, store: Path, *, n_boot: int, target: str = "future") -> list[dict]:
    """One row per (label scored, compared pair) of a trained store."""
    from rolling_calib.core.question import Question
    from rolling_calib.core.resampling import Resampling
    from rolling_calib.analysis.comparison import compare_store
    from rolling_calib.analysis.diagnostics import diagnose_store
    from rolling_calib.analysis.scoring import score_store
    from rolling_calib.core.metaeval import split_seed_accuracy
    from rolling_calib.execution.reader import MissingLabelError

    rows = []
    for label in ("raw", "learn"):
        try:
            scores = score_store(store, label=label)
        except MissingLabelError:
            continue
        if label == "learn" and scores.learned_labels and all(lab.unit != "normalised"
                                                               for lab in scores.learned_labels.values()):
            continue   # the learned label is the raw one: the raw row says it all
        question, resampling = Question(target=target), Resampling(n_boot=n_boot)
        comparison = compare_store(scores, question=question, resampling=resampling)
        diagnosis = diagnose_store(store, scores=scores, question=question, resampling=resampling)
        values = {n: scores.scores_of(n) for n in scores.pipelines}
        for pair, pv in zip(comparison.pairs, comparison.verdicts):
            held = split_seed_accuracy(values, [(pair.better, pair.worse)], metrics=["ql", "cql"], ground_truth="ql")
            held = held.set_index("metric")
            summary = comparison.summary.set_index("pipeline")
            rows.append({
                "cell": cell.name, "frequency": cell.frequency, "model": cell.model, "notes": list(cell.notes),
                "normalisation": cell.normalisation, "epochs": cell.epochs, "label": label,
                "loss_unit": scores.label.loss_unit, "pair": [pair.better, pair.worse],
                "seeds": int(summary.loc[pair.better, "runs"]),
                "std_ratio": {n: _ratio(diagnosis, n) for n in (pair.better, pair.worse)},
                "held_out": {m: {"accuracy": float(held.loc[m, "split_accuracy"]), "low": float(held.loc[m, "split_low"]),
                                 "high": float(held.loc[m, "split_high"])} for m in ("ql", "cql")},
                "verdicts": {m: {"outcome": v.outcome, "winner": v.winner, "difference": v.difference,
                                 "ci_low": v.ci_low, "ci_high": v.ci_high, "dominant": v.dominant_uncertainty,
                                 "target": v.target, "seeds_needed": v.seeds_needed.n,
                                 "seeds_reason": v.seeds_needed.reason}
                             for m, v in pv.verdicts.items()},
                "ground_truth_determined": pv.ground_truth_determined,
                "in_sample": {m: {"accuracy": pair.accuracies[m].accuracy, "low": pair.accuracies[m].ci_low,
                                  "high": pair.accuracies[m].ci_high} for m in ("ql", "cql")},
                "accuracies_hidden": comparison.accuracies_shown(pair),
                "ic": {n: float(summary.loc[n, "ic_mean"]) for n in (pair.better, pair.worse)},
                "warnings": sorted({w.kind for w in comparison.warnings}),
            })
    return rows


def _verdict_cell(v: dict) -> str:
    """``winner (n seeds)``: the verdict and the seeds per pipeline that give an 80% chance to decide."""
    if not v:
        return "n/a"
    n = v.get("seeds_needed")
    seeds = f"{n} seeds" if n is not None else ("none suffices" if "market-time" in (v.get("seeds_reason") or "")
                                                 else "> 1000 seeds")
    return f"{v.get('winner') or 'undetermined'} ({seeds})"


def _f(x: float, d: int = 2) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{d}f}"


def markdown(rows: list[dict]) -> str:
    """The map as a Markdown table (the one formatter), one row per cell, label and pair."""
    from rolling_calib.core.tables import format_table, sig

    body = []
    for r in rows:
        a, b = r["pair"]
        ratio = "; ".join(f"{n} {_f(s['ratio'])} [{_f(s['ci_low'])}, {_f(s['ci_high'])}]" for n, s in r["std_ratio"].items())
        held = r["held_out"]
        helps = ", ".join(f"{n}: {'yes' if s['helps'] else 'no' if s['helps'] is False else '?'}"
                          for n, s in r["std_ratio"].items())
        v = r["verdicts"]
        model = r["model"] + (f" ({'; '.join(r['notes'])})" if r.get("notes") else "")
        body.append([r["frequency"], model, r["normalisation"], r["epochs"], r["label"], f"{a} vs {b}",
                     r["seeds"], ratio,
                     f"{_f(held['ql']['accuracy'])} [{_f(held['ql']['low'])}, {_f(held['ql']['high'])}]",
                     f"{_f(held['cql']['accuracy'])} [{_f(held['cql']['low'])}, {_f(held['cql']['high'])}]",
                     _verdict_cell(v.get("ql", {})), _verdict_cell(v.get("cql", {})),
                     ", ".join(sig(x, 2) for x in r["ic"].values()), ", ".join(r["warnings"]) or "none", helps])
    return format_table(body, ["frequency", "model", "label normalisation", "epochs", "label scored", "pair", "seeds",
                               "CQL/QL seed std [95% CI]", "held-out Acc QL", "held-out Acc CQL",
                               "QL verdict (seeds to decide)", "CQL verdict (seeds to decide)", "IC", "guards", "calibration helps"], style="markdown")


#: The source's reported pairwise accuracies, QL -> CQL (docs/method.md §3.3), by our pipeline names.
SOURCE_REPORTED = {("h32", "h64"): ("hidden 32 vs 64", "69%", "76%"), ("h64", "h32"): ("hidden 32 vs 64", "69%", "76%"),
                   ("h64", "l3"): ("layers 3 vs 2", "93%", "99%"), ("l3", "h64"): ("layers 3 vs 2", "93%", "99%")}


def source_table(rows: list[dict]) -> str:
    """The source's reported accuracies beside ours for the same pairs (the source cells only)."""
    from rolling_calib.core.tables import format_table

    body = []
    for r in rows:
        key = tuple(r["pair"])
        if not r["cell"].startswith("source_") or key not in SOURCE_REPORTED:
            continue
        name, src_ql, src_cql = SOURCE_REPORTED[key]
        ins, held = r["in_sample"], r["held_out"]
        hidden = r.get("accuracies_hidden")
        acc = ("not shown (" + hidden + ")") if hidden else \
            f"{_f(ins['ql']['accuracy'])} -> {_f(ins['cql']['accuracy'])}"
        body.append([r["frequency"], r["normalisation"], r["label"], name, r["seeds"], f"{src_ql} -> {src_cql}", acc,
                     f"{_f(held['ql']['accuracy'])} -> {_f(held['cql']['accuracy'])}",
                     r["verdicts"].get("ql", {}).get("winner") or "undetermined",
                     "; ".join(f"{n} {_f(v['ratio'])}" for n, v in r["std_ratio"].items())])
    return format_table(body, ["frequency", "label normalisation", "label scored", "pair", "seeds", "source: Acc QL -> CQL",
                               "ours: Acc QL -> CQL (all seeds)", "ours: held-out QL -> CQL", "QL verdict",
                               "CQL/QL seed std"], style="markdown")


def compute_table(results: dict) -> str:
    """What each cell cost: units, the units' summed seconds (one core each), the analysis CPU-seconds."""
    from rolling_calib.core.tables import format_table

    body = []
    for cell in CELLS:
        entry = results["cells"].get(cell.name)
        if not entry or "rows" not in entry:
            continue
        units = len(list((OUT / cell.name / "units").rglob("w*.json"))) if (OUT / cell.name).is_dir() else None
        body.append([cell.name, cell.config, units, f"{entry.get('train_cpu_seconds', 0) / 60:.1f}",
                     f"{entry.get('analysis_cpu_seconds', 0):.1f}"])
    return format_table(body, ["cell", "workflow", "units", "training (core-minutes)", "analysis (CPU-s)"],
                        style="markdown")


def _write_doc(doc: Path, table: str, begin: str = BEGIN, end: str = END) -> None:
    text = doc.read_text(encoding="utf-8")
    if begin not in text or end not in text:
        raise SystemExit(f"{doc}: expected the markers {begin} and {end}")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{begin}\n{table}\n{end}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="CELL", help="only these cells (see --list)")
    parser.add_argument("--list", action="store_true", help="list the cells and exit")
    parser.add_argument("--no-run", action="store_true", help="analyse the stores as they are (train nothing)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes per run (default 1)")
    parser.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"stores and results (default {OUT.relative_to(REPO)})")
    parser.add_argument("--daily-store", type=Path, default=REPO / "qlib_data" / "us25_day",
                        help="Qlib day store of the real daily bars (rolling-calib data ingest)")
    parser.add_argument("--minute-store", type=Path, default=OUT / "qlib_minute",
                        help="the synthetic minute store (rolling-calib data synth --start 2016-07-01 --end 2018-06-30)")
    parser.add_argument("--persistent-store", type=Path, default=OUT / "qlib_minute_persistent",
                        help="the synthetic minute store with a persistent signal (rolling-calib data synth --signal "
                             "persistent --params workflows/demo_market.yaml --start 2016-07-01 --end 2018-06-30)")
    parser.add_argument("--doc", type=Path, default=None, help="write the table into this Markdown file's markers")
    args = parser.parse_args(argv)
    cells = [c for c in CELLS if not args.only or c.name in args.only]
    if args.list:
        for c in CELLS:
            print(f"{c.name:<22} {c.config:<48} {' '.join(c.sets)}")
        return 0
    results_path = args.out / "regime_map.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {"cells": {}}
    for cell in cells:
        store = args.out / cell.name
        entry = results["cells"].setdefault(cell.name, {})
        if not args.no_run:
            print(f"[{time.strftime('%H:%M:%S')}] {cell.name}: training what is missing into {store}", flush=True)
            entry["run_seconds"] = round(_run(cell, store, workers=args.workers, daily=args.daily_store,
                                               minute=args.minute_store, persistent=args.persistent_store), 1)
        if not (store / "manifest.json").is_file():
            print(f"{cell.name}: no store at {store}; skipped", flush=True)
            continue
        t0 = time.process_time()
        entry["rows"] = analyse(cell, store, n_boot=args.n_boot)
        entry["analysis_cpu_seconds"] = round(time.process_time() - t0, 1)
        entry["train_cpu_seconds"] = _train_seconds(store)
        args.out.mkdir(parents=True, exist_ok=True)
        results_path.write_text(json.dumps(results, indent=2, default=str) + "\n")
        print(f"[{time.strftime('%H:%M:%S')}] {cell.name}: {len(entry['rows'])} row(s) analysed", flush=True)
    rows = [r for c in CELLS for r in results["cells"].get(c.name, {}).get("rows", [])]
    table = markdown(rows)
    (args.out / "regime_map.md").write_text(table + "\n")
    sources = source_table(rows)
    (args.out / "source_table.md").write_text(sources + "\n")
    if args.doc is not None:
        _write_doc(args.doc, table)
        _write_doc(args.doc, sources, "<!-- source-table:begin -->", "<!-- source-table:end -->")
        _write_doc(args.doc, compute_table(results), "<!-- compute-table:begin -->", "<!-- compute-table:end -->")
        # the source's measured table in its own README too (workflows/source/README.md)
        _write_doc(SOURCE_README, sources, "<!-- source-table:begin -->", "<!-- source-table:end -->")
    print(table)
    print()
    print(sources)
    return 0


def _train_seconds(store: Path) -> float:
    """Seconds the store's units took (each unit's ``timings.total_s``, summed over units: one core each)."""
    total = 0.0
    for side in (store / "units").rglob("w*.json"):
        total += float(json.loads(side.read_text()).get("timings", {}).get("total_s", 0.0))
    return round(total, 1)


if __name__ == "__main__":
    raise SystemExit(main())
