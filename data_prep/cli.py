"""``rolling-calib data ...``: build Qlib minute stores (synthetic or from vendor files).

Sub-commands
------------
``synth``   generate the synthetic market into a store
``ingest``  validate, repair and ingest vendor CSV / Parquet files into a store
``info``    summarise a store (calendar, instruments, metadata)
``facts``   stylised facts of a store (volatility, autocorrelation, predictability, co-movement, ...)

Module-level imports stay light: the handlers import numpy/pandas/polars when they run.
"""

from __future__ import annotations

import argparse
import json
import sys

_DEFAULT_START = "2012-01-01"
_DEFAULT_END = "2018-12-31"

#: The words of ``--json`` and ``--no-progress``, the same for every ``rolling-calib`` command. Declared here
#: because ``data_prep`` may not import ``rolling_calib``; ``rolling_calib.cli.options`` uses these.
JSON_HELP = "print the result as JSON on stdout, and nothing else there (implies --no-progress)"
NO_PROGRESS_HELP = "hide the progress bars (they go to stderr)"


def _bounded(kind: type, lo: float, hi: float, why: str, *, open_low: bool = False):
    """An argparse ``type=``: a finite ``kind`` in ``[lo, hi]`` (``(lo, hi]`` with ``open_low``), the bound named.

    >>> _bounded(int, 0, 10, "test")("11")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected an integer in [0, 10] (test), found 11
    """
    import math

    noun = "an integer" if kind is int else "a number"
    shown = str if kind is int else (lambda x: f"{x:g}")
    words = f"expected {noun} in {'(' if open_low else '['}{shown(lo)}, {shown(hi)}] ({why})"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{words}, found {text!r}") from None
        if not math.isfinite(value) or value > hi or value < lo or (open_low and value == lo):
            raise argparse.ArgumentTypeError(f"{words}, found {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def add_output_options(container) -> None:
    """``--json`` and ``--no-progress`` on a parser or an argument group: every command takes both, in the same words."""
    container.add_argument("--json", action="store_true", help=JSON_HELP)
    container.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)


def show_progress(args: argparse.Namespace) -> bool:
    """Progress bars unless ``--no-progress`` or ``--json`` was given.

    >>> show_progress(argparse.Namespace(json=True, no_progress=False))
    False
    """
    return not (args.json or args.no_progress)


def register(subparsers) -> None:
    """Add the ``data`` command group to the top-level ``rolling-calib`` parser."""
    parser = subparsers.add_parser(
        "data",
        help="build Qlib minute-bar stores: synthetic market or vendor files",
        description=(
            "Turn one-minute bars into a Qlib provider directory that "
            "qlib.init(provider_uri={'1min': DIR}, region='us') reads. "
            "The calendar is the NYSE's (exchange_calendars XNYS), bars 09:30-15:59 New York time."
        ),
    )
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
    sub = parser.add_subparsers(title="data commands", metavar="SUBCOMMAND")
    _register_synth(sub)
    _register_ingest(sub)
    _register_info(sub)
    _register_facts(sub)


# ---------------------------------------------------------------------------- synth
def _register_synth(sub) -> None:
    p = sub.add_parser(
        "synth",
        help="generate the synthetic minute market into a Qlib store",
        description=(
            "Generate synthetic one-minute bars (heavy tails, volatility clustering, intraday U-shapes, "
            "market and sector factors, overnight gaps, missing minutes, and a weakly predictable "
            "component whose strength and sign drift between regimes) and write them as a Qlib store. "
            "Deterministic in --seed. The model is documented in data_prep/synthetic.py."
        ),
        epilog="example: rolling-calib data synth --out qlib_data/synth --start 2018-01-01 --end 2018-03-31 --symbols AAPL,F",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="store directory to write")
    p.add_argument("--start", metavar="DATE", default=_DEFAULT_START, help=f"first calendar date (default {_DEFAULT_START})")
    p.add_argument("--end", metavar="DATE", default=_DEFAULT_END, help=f"last calendar date, inclusive (default {_DEFAULT_END})")
    p.add_argument(
        "--symbols", metavar="LIST",
        default=None,
        help="comma-separated symbols (default: the 25 of docs/method.md §3.3)",
    )
    p.add_argument("--seed", type=_bounded(int, 0, 2**32 - 1, "numpy's seeding range"), metavar="N", default=0, help="random seed; recorded in DIR/meta.json (default 0)")
    p.add_argument("--signal", choices=("drifting", "persistent", "none"), default="drifting",
                   help="the predictable component: drifting (its sign flips between 2-5-month regimes with "
                        "probability 0.7; the default), persistent (one sign for the whole range, strength drifting "
                        "slowly: oracle IC about 0.05), none (no predictable component, no bid-ask bounce); "
                        "meta.json records the oracle IC")
    p.add_argument("--params", metavar="FILE", default=None,
                   help="YAML mapping of market parameters (fields of data_prep.synthetic.MarketParams) on top of "
                        "--signal's; an unknown key is refused")
    p.add_argument("--oracle-field", action="store_true",
                   help="also write the field $oracle: the generator's expectation of the 10-minute label (bp) given "
                        "its full state at each bar (momentum, regime, bid-ask bounce), the ground truth a "
                        "prediction's true excess risk is measured against; the bars are the same")
    add_output_options(p)
    p.set_defaults(func=_synth)


def _synth(args: argparse.Namespace) -> int:
    from data_prep import qlib_store
    from data_prep.synthetic import DEFAULT_SYMBOLS, build_synthetic_store, load_market_params, market_params

    symbols = DEFAULT_SYMBOLS if args.symbols is None else [s for s in args.symbols.split(",") if s.strip()]
    try:
        params = (market_params(args.signal) if args.params is None
                  else load_market_params(args.params, signal=args.signal))
        out = build_synthetic_store(
            args.out, start=args.start, end=args.end, symbols=[s.strip() for s in symbols], seed=args.seed,
            params=params, progress=show_progress(args), oracle_field=args.oracle_field,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    meta = qlib_store.read_meta(out)
    summary = {
        "store": str(out),
        "seed": meta["seed"],
        "symbols": len(meta["symbols"]),
        "bars_per_symbol": meta["calendar"]["bars"],
        "sessions": meta["calendar"]["sessions"],
        "rows": meta["total_rows"],
        "regimes": len(meta["regimes"]["beta"]),
        "signal": meta["signal"],
        "oracle_ic": meta["oracle_ic"],
        "oracle_ic_full_state": meta.get("oracle_ic_full_state"),
        "fields": meta["fields"],
        "seconds": meta["seconds"],
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"wrote {summary['rows']:,} bars ({summary['symbols']} symbols x {summary['sessions']} sessions, "
            f"{summary['regimes']} regimes, seed {summary['seed']}) to {out} in {summary['seconds']:.1f} s; "
            f"signal {summary['signal']}, oracle IC {summary['oracle_ic']} (given the full state "
            f"{summary['oracle_ic_full_state']})"
        )
    return 0


# ---------------------------------------------------------------------------- ingest
def _register_ingest(sub) -> None:
    p = sub.add_parser(
        "ingest",
        help="validate and ingest vendor minute or daily bars (CSV / Parquet) into a Qlib store",
        description=(
            "Read vendor one-minute bars (CSV or Parquet; one file per symbol or one long file with a "
            "symbol column; separate date and time columns, one timestamp with or without a zone, or "
            "epoch milliseconds), validate them against the NYSE calendar and write a Qlib store. "
            "Without --strict or --repair the command validates everything and refuses to write if any "
            "problem is found, printing a summary. --strict stops at the first problem naming file, line, "
            "field, expected and found. --repair fixes what can be fixed safely and reports every row "
            "dropped or changed. A vendor's 16:00 bar (13:00 on early closes) is the closing-auction print, "
            "not a one-minute bar: it is reported as closing_auction and dropped by --repair. Without a vwap "
            "column, vwap = (high + low + close) / 3. --repair drops an OHLC-inconsistent bar (an open or close "
            "within one tick of [low, high] is clamped into it; high and low are never changed). A symbol is a name, "
            "never a path: one with '/', '..', a control character ... is refused with file and line. Disk full "
            "and other write errors are one line naming the file, the free space and the fix; nothing is published. "
            "If DIR already holds a store, new sessions are appended "
            "(overlap must agree with what is stored; history is never rewritten). Daily bars (--freq day, "
            "or a file with a date column of dates only) give a Qlib day store: calendars/day.txt on the NYSE "
            "sessions, features/<sym>/<field>.day.bin; the checks that apply to one bar per session run."
        ),
        epilog=(
            "example: rolling-calib data ingest ../shared/data/us-equities-1min-2018 --out qlib_data/real "
            "--repair --report ingest_report.md; daily: rolling-calib data ingest "
            "../shared/data/us-equities-daily-2013-2018 --out qlib_data/us25_day --freq day"
        ),
    )
    p.add_argument("src", nargs="+", metavar="SRC", help="files or directories (*.csv, *.csv.gz, *.parquet)")
    p.add_argument("--out", required=True, metavar="DIR", help="store directory to write or extend")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--strict", action="store_true", help="stop at the first problem with a precise message")
    mode.add_argument("--repair", action="store_true", help="fix what is safe, report every row dropped or changed")
    p.add_argument("--report", metavar="FILE", help="write the validation report (.json or .md; both for other suffixes)")
    p.add_argument("--freq", choices=("1min", "day"), default=None,
                   help="bar frequency of the files: 1min, or day (daily bars with a date column: writes a Qlib day "
                        "store, calendars/day.txt); default: detected, day when the time is a date column holding "
                        "dates only and there is no time-of-day column")
    p.add_argument("--tz", metavar="ZONE", default="America/New_York", help="zone of naive timestamps in the files (default America/New_York)")
    p.add_argument("--start", metavar="DATE", default=None, help="first date of the store calendar (default: first date in the data)")
    p.add_argument("--end", metavar="DATE", default=None, help="last date of the store calendar (default: last date in the data)")
    _add_column_mapping(p)
    _add_check_options(p)
    add_output_options(p)
    p.set_defaults(func=_ingest)


def _add_column_mapping(p: argparse.ArgumentParser) -> None:
    """Where the vendor's columns are: symbol, timestamp (one of three layouts) and the OHLCV fields."""
    cols = p.add_argument_group("column mapping (defaults fit the shared 2018 sample)")
    cols.add_argument("--symbol-col", metavar="COL", default="symbol", help="column with the symbol in a long file (default symbol)")
    cols.add_argument("--symbol", default=None,
                      help="symbol of a single-symbol file (default: the file name without .csv/.parquet, said in the "
                           "report); a name of letters, digits and . - _ ^ = & + @ ~, never a path (BRK.B, not BRK/B)")
    cols.add_argument("--date-col", metavar="COL", default="date", help="date column, used with --time-col (default date)")
    cols.add_argument("--time-col", metavar="COL", default="ToD",
                      help="time-of-day column (HH:MM:SS or HH:MM), used with --date-col (default ToD)")
    cols.add_argument("--datetime-col", metavar="COL", default=None, help="single timestamp column (ISO text, zone optional)")
    cols.add_argument("--epoch-ms-col", metavar="COL", default=None, help="timestamp column in epoch milliseconds (UTC)")
    for field in ("open", "high", "low", "close", "volume", "vwap"):
        cols.add_argument(f"--{field}-col", metavar="COL", default=field, help=f"{field} column (default {field})")


def _add_check_options(p: argparse.ArgumentParser) -> None:
    """Corporate actions, the universe file, and the thresholds of the sanity checks."""
    p.add_argument(
        "--adjustments",
        metavar="FILE",
        default=None,
        help="CSV of corporate actions: symbol,date,split_ratio,dividend (back-adjusts prices, writes $factor)",
    )
    p.add_argument("--universe", metavar="NAME", default=None,
                   help="also write instruments/NAME.txt (lower-cased, as Qlib opens it) for the ingested symbols")
    p.add_argument("--stale-minutes", type=_bounded(int, 2, 100_000, "a year of minute bars"), default=30, metavar="N",
                   help="report runs of >= N bars with an unchanged close as stale_prices (default 30)")
    p.add_argument("--max-jump", type=_bounded(float, 1, 1000, "a ratio > 1", open_low=True), default=1.5, metavar="RATIO",
                   help="report a bar whose open is beyond RATIO x either way of the previous close (overnight or "
                        "within a session) as price_jump, naming the split ratio that fits (default 1.5)")
    p.add_argument("--max-spike", type=_bounded(float, 1, 1000, "a ratio > 1", open_low=True), default=3.0, metavar="RATIO",
                   help="a bar with a price beyond RATIO x either way of both neighbouring bars' closes is a "
                        "price_spike error, dropped by --repair (default 3)")


def _ingest(args: argparse.Namespace) -> int:
    from data_prep import ingest

    try:
        options = ingest.IngestOptions.from_namespace(args)
        result = ingest.ingest(args.src, args.out, options=options, progress=show_progress(args))
    except ingest.ValidationFailed as exc:
        print(exc.report.summary_text(), file=sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        _write_report(ingest, exc.report, args.report)
        return 1
    except ValueError as exc:  # StrictError, StoreConflict, unreadable files, bad options, disk full
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not _write_report(ingest, result.report, args.report, written=result.store):
        return 1
    if args.json:
        print(json.dumps(result.summary(), indent=2, default=str))
    else:
        print(result.report.summary_text())
        print(result.summary_line())
    return 0


def _write_report(ingest, report, path: str | None, *, written=None) -> bool:
    """Write ``--report``; on a failed write (disk full ...) print one line and return False."""
    if not path:
        return True
    try:
        ingest.write_report(report, path)
    except ValueError as exc:  # data_prep.qlib_store.WriteFailed
        what = f"; the store {written} was written" if written is not None else ""
        print(f"error: report not written: {exc}{what}", file=sys.stderr)
        return False
    return True


# ---------------------------------------------------------------------------- info
def _register_info(sub) -> None:
    p = sub.add_parser(
        "info",
        help="summarise a Qlib store (minute or daily)",
        description=("Print a store's frequency (from its calendar file: calendars/1min.txt or calendars/day.txt), "
                     "calendar span, instruments, fields and how it was made (meta.json). It reads a few small "
                     "files: no progress bar (--no-progress has nothing to hide)."),
    )
    p.add_argument("store", metavar="DIR", help="Qlib store directory")
    p.add_argument("--plot", metavar="FILE", default=None,
                   help="also draw price paths and the intraday shapes of volatility and volume (PNG/PDF/SVG)")
    add_output_options(p)
    p.set_defaults(func=_info)


def _info(args: argparse.Namespace) -> int:
    from data_prep.qlib_store import store_info

    try:
        info = store_info(args.store)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.plot:
        from data_prep.plots import plot_store

        info["plot"] = str(plot_store(args.store, args.plot))
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    cal = info["calendar"]
    print(f"store       {info['store']}")
    print(f"source      {info.get('source', 'unknown')}")
    print(f"freq        {info.get('freq', '1min')}")
    if info.get("freq") == "day":
        print(f"calendar    {cal['sessions']:,} sessions, {cal['first'][:10]} .. {cal['last'][:10]}")
    else:
        print(f"calendar    {cal['bars']:,} bars, {cal['sessions']:,} sessions, {cal['first']} .. {cal['last']}")
    for name, syms in info["instruments"].items():
        print(f"instruments {name}: {len(syms)} ({', '.join(syms[:10])}{' ...' if len(syms) > 10 else ''})")
    print(f"fields      {', '.join(info['fields'])}")
    if args.plot:
        print(f"plot        {info['plot']}")
    return 0


# ---------------------------------------------------------------------------- facts
def _register_facts(sub) -> None:
    p = sub.add_parser(
        "facts",
        help="print the stylised facts of a minute store (several stores: side by side)",
        description=(
            "Compute, over the store's bars between --start and --end, the stylised facts that say whether "
            "a minute market looks real: median 10-minute return std per stock (bp), lag-1 autocorrelation "
            "of 1- and 10-minute returns, predictability (pooled corr of the mean of the past 60 one-minute "
            "returns with the next 10-minute return, within sessions), mean pairwise correlation of 1-minute "
            "returns, Spearman corr(volume, |return|), the 10:00-10:30 / 12:00-14:00 volatility ratio, the "
            "max/min and P95/P5 of the daily cross-stock mean realised volatility, and the drift of the "
            "label mean (mean over months of the squared monthly mean of the 10-minute forward return over "
            "its variance), and, for a synthetic store, its signal mode and oracle IC (meta.json: the mean per-bar IC of "
            "the generator's conditional expectation of the 10-minute label). Returns never span a session close. "
            "Formulas: data_prep/facts.py. "
            "No progress bar (--no-progress has nothing to hide); --json prints one object, a list for several stores."
        ),
        epilog="example: rolling-calib data facts qlib_data/synth qlib_data/real --start 2018-02-16 --end 2018-04-20",
    )
    p.add_argument("store", nargs="+", metavar="DIR", help="Qlib store directory (several: one column each)")
    p.add_argument("--start", metavar="DATE", default=None, help="first calendar date (default: the store's first)")
    p.add_argument("--end", metavar="DATE", default=None, help="last calendar date, inclusive (default: the store's last)")
    add_output_options(p)
    p.set_defaults(func=_facts)


def _facts(args: argparse.Namespace) -> int:
    from data_prep.facts import format_facts, stylized_facts
    from data_prep.qlib_store import check_committed

    results = []
    try:
        for store in args.store:
            check_committed(store)
            results.append(stylized_facts(store, start=args.start, end=args.end))
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        import math

        clean = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in results]
        print(json.dumps(clean[0] if len(clean) == 1 else clean, indent=2))
    else:
        print(format_facts(results))
    return 0
