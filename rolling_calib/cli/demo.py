"""``rolling-calib demo``: the whole method on the embedded synthetic market, in minutes."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from rolling_calib.cli.errors import command_errors
from rolling_calib.cli.options import (
    add_bootstrap_arguments,
    add_out_argument,
    add_output_arguments,
    add_question_arguments,
    add_seeds_argument,
    add_tracking_arguments,
    add_workers_argument,
    question_from_args,
    resampling_from_args,
    show_progress,
)


def _market(args: argparse.Namespace) -> tuple[Path | None, str]:
    """``(market file or None, signal)`` from ``--market``: a signal's name, else a parameter file."""
    from rolling_calib.experiment.demo import DEMO_MARKET

    if args.market is None:
        return DEMO_MARKET, "persistent"
    if args.market in ("drifting", "persistent", "none"):
        return None, args.market
    return Path(args.market), "persistent"


@command_errors("demo")
def handle(args: argparse.Namespace) -> int:
    from rolling_calib.experiment.demo import DEMO_CASES, DemoCase, run_demo

    cases = DEMO_CASES if args.config is None else (DemoCase("custom", f"The experiment of {args.config}",
                                                             Path(args.config), "store", "report"),)

    def answer(case) -> None:   # each case's answer as soon as it is done, before the next case trains
        if not args.json:
            _print_case(case)
            sys.stdout.flush()

    out = sys.stdout
    market, signal = _market(args)
    with contextlib.redirect_stdout(sys.stderr):  # library chatter must not corrupt --json
        result = run_demo(args.out, workers=args.workers, seeds=args.seeds, cases=cases,
                          question=question_from_args(args), resampling=resampling_from_args(args),
                          progress=show_progress(args), track=not args.no_tracking,
                          on_case=lambda case: _to(out, answer, case), market=market, signal=signal)
    if args.json:
        print(json.dumps(_json(result), indent=2))
        return 0
    print(f"data:   {result.data_dir}{' (generated)' if result.data_built else ' (reused)'}")
    print(f"wall time: {result.seconds:.1f} s ({', '.join(f'{c.case.name} {c.seconds:.0f} s' for c in result.cases)})")
    return 0


def _to(stream, show, case) -> None:
    """``show(case)`` with stdout on ``stream`` (the command's own, not the library chatter's stderr)."""
    with contextlib.redirect_stdout(stream):
        show(case)


def _json(result) -> dict:
    """The first case's comparison at the top (as ``compare --json``), every case under ``cases``."""
    data = result.comparison.to_dict()
    data.update(store=str(result.store), report={k: str(v) for k, v in result.report.items()},
                seconds=round(result.seconds, 1), tracking_uri=result.tracking_uri,
                tracking_message=result.tracking_message,
                diagnosis=None if result.diagnosis is None else result.diagnosis.to_dict())
    data["cases"] = [{
        "name": c.case.name, "title": c.case.title, "store": str(c.store), "seconds": round(c.seconds, 1),
        "report": {k: str(v) for k, v in c.report.items()}, "comparison": c.comparison.to_dict(),
        "diagnosis": None if c.diagnosis is None else c.diagnosis.to_dict(),
        "learned_label": None if c.learned is None else c.learned.to_dict(),
        "learned_diagnosis": None if c.learned_diagnosis is None else c.learned_diagnosis.to_dict(),
        "raw_label": None if c.raw is None else c.raw.to_dict(),
    } for c in result.cases]
    return data


def _print_case(case) -> None:
    """One case: its verdicts and warnings, whether calibration can help (a table), the other label, its files."""
    print(f"\n=== {case.case.title} ===\n")
    print(case.comparison.format_headline())
    _print_assessment(case.diagnosis, case.report)
    if case.learned is not None and case.learned is not case.comparison:
        print("\nRe-scored against the label the models learned (both labels are stored: nothing retrained):\n")
        print(case.learned.format_headline())
        _print_assessment(case.learned_diagnosis, None)
    if case.raw is not None:
        kinds = ", ".join(f"[{w.kind}]" for w in case.raw.warnings) or "no warning"
        print(f"\nAgainst the raw return instead (as Qlib's SignalRecord keeps it; both labels are stored): {kinds}"
              f" -- rolling-calib compare --store {case.store} --label raw")
    print(f"\nstore:  {case.store}  (rolling-calib compare --store {case.store} for every table"
          f"{'; --label learn for the learned label' if case.learned is not None and case.learned is not case.comparison else ''})")
    print(f"report: {case.report['html']}  (Markdown: {case.report['markdown']})")
    if case.tracking_uri is not None:
        print(f"MLflow: {case.tracking_uri} (browse: mlflow ui --backend-store-uri {case.tracking_uri})")
    if case.tracking_message:  # a repaired tracking database, or why tracking failed
        print(case.tracking_message)


def _print_assessment(diagnosis, report) -> None:
    if diagnosis is None:
        return
    where = "the report says why" if report else "rolling-calib diagnose --store STORE says why"
    print(f"\nCan calibration help here? ({where})\n")
    print(diagnosis.table())


def register(subparsers) -> None:
    from rolling_calib.config.workflows import workflows_dir

    try:
        workflows = workflows_dir()
    except FileNotFoundError:  # an install without its data: `demo` then reports it; the other commands work
        workflows = Path("workflows")
    parser = subparsers.add_parser(
        "demo",
        help="run the whole method on a synthetic market in a few minutes (start here)",
        description=(
            "Generate the synthetic 25-stock minute market (a persistent signal the models learn: "
            "workflows/demo_market.yaml) if absent and run two cases of a reduced but real "
            "rolling schedule (2 pipelines x SEEDS seeds x 2 windows, 6 evaluation months, fine-tuning between "
            "windows) on a local process pool: (1) trained and scored on the raw 10-minute return; (2) trained on "
            "CSRankNorm labels as Qlib's benchmarks train, scored against the raw return (the scale-mismatch "
            "warning) and re-scored against the learned label without retraining. Each case prints its verdicts "
            "(better, worse or undetermined, over seeds on the evaluated days, with the claim about the market's "
            "future beside it as the assumption it rests on) and when each pipeline was better, the warnings and whether "
            "calibration can help, and writes its HTML report. Re-running reuses the data and completed units. "
            "Everything goes under --out: the data (qlib_data/), each case's result store and its report. "
            "The demo files train 10 seeds per pipeline (docs/method.md §3.3) unless --seeds says otherwise."
        ),
        epilog=(f"The experiment files (the repository's workflows/) are installed in {workflows}. "
                f"Scale up: rolling-calib run {workflows / 'method33.yaml'} --store runs/m33 --workers 8 "
                "(docs/experiments.md)."),
    )
    add_out_argument(parser, what="output directory, holding the data, the result stores and the reports",
                     default="demo_out")
    add_workers_argument(parser)
    add_seeds_argument(parser)
    parser.add_argument("--market", metavar="FILE|SIGNAL", default=None,
                        help="the synthetic market: a YAML of market parameters on a persistent signal (default "
                             f"{workflows / 'demo_market.yaml'}: one the models learn), or drifting, persistent or "
                             "none for that signal's own parameters (drifting: the demo's market before it had a "
                             "persistent signal); see rolling-calib data synth --help")
    parser.add_argument("--config", default=None, metavar="YAML",
                        help=f"run one experiment file instead of the two cases ({workflows / 'demo.yaml'} and "
                             f"{workflows / 'demo_csrank.yaml'})")
    add_question_arguments(parser, only=("target",))
    add_bootstrap_arguments(parser, only=("n_boot",))
    add_tracking_arguments(parser, uri=False)
    add_output_arguments(parser, json_prints="the comparisons (the first case's at the top, every case under "
                                             "'cases')")
    parser.set_defaults(func=handle)
