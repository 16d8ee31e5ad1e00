"""The workflow's backtest, once per seed over the joined windows: Qlib's own ``qlib.backtest`` on the run's predictions.

A Qlib workflow names its backtest in a ``PortAnaRecord`` record (``task.record``, usually
``config: *port_analysis_config``: a strategy, an executor and the ``backtest`` keyword arguments:
account, benchmark, exchange kwargs). ``qrun`` runs it once, on one model's predictions of the
test segment. Qlib's own rolling (``qlib.contrib.rolling.base.Rolling``) joins the windows'
predictions over the whole span (``RollingEnsemble``) and then runs the records on the joined
predictions once. rolling-calib does the same, per seed:

* :func:`resolve_backtest` reads the record (its class with its keyword arguments, as Qlib
  constructs it, so an omitted ``config`` or ``executor`` takes ``PortAnaRecord``'s own defaults)
  and resolves it for the store at plan time: a benchmark that is not an instrument of the store
  is replaced by the **equal-weighted universe** (Qlib's benchmark given as a list of codes: the
  mean of their daily ``$close/Ref($close,1)-1``), and said; a strategy whose ``topk`` is at least
  the universe's size is not backtested (every model then holds the same portfolio, Qlib issue
  #1930): :attr:`BacktestSpec.refused` says so, before anything trains;
* :func:`run_backtest` runs ``qlib.backtest.backtest`` (what ``PortAnaRecord._generate`` calls)
  on the joined predictions with the dates of the schedule: the first and last test session
  (a YAML's ``start_time``/``end_time`` belong to its one test segment), and returns the daily
  report: ``return``, ``bench``, ``cost``, ``turnover`` and the excess returns without and with
  cost, ``return - bench`` and ``return - bench - cost`` (what ``PortAnaRecord`` hands to
  ``risk_analysis``).

Only daily stores are backtested (Qlib's day-step executor); on a minute store the record is
not run, and the plan says so.
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

__all__ = ["BACKTEST_COLUMNS", "BacktestSpec", "backtest_record", "resolve_backtest", "run_backtest",
           "whole_universe", "without_backtests"]

#: Columns of a seed's daily backtest report (the store's ``backtests/<pipeline>/seed<k>.parquet``).
BACKTEST_COLUMNS = ("date", "return", "bench", "cost", "turnover", "excess_return", "excess_return_cost")
_RECORDS = "qlib.workflow.record_temp"


def _record_class(config: Mapping[str, Any]) -> type | None:
    from qlib.utils import get_callable_kwargs

    try:
        cls, _ = get_callable_kwargs(dict(config), default_module=_RECORDS)
    except (AttributeError, ImportError, ValueError, TypeError, KeyError):
        return None
    return cls if isinstance(cls, type) else None


def _is_backtest_record(config: Any) -> bool:
    from qlib.workflow.record_temp import PortAnaRecord

    if not isinstance(config, Mapping):
        return False
    if config.get("class") == "PortAnaRecord":
        return True
    cls = _record_class(config)
    return cls is not None and issubclass(cls, PortAnaRecord)


def backtest_record(task: Mapping[str, Any]) -> tuple[int, dict] | None:
    """``(index, record)`` of the task's first backtest record (``PortAnaRecord`` or a subclass), or ``None``.

    >>> backtest_record({"record": [{"class": "SignalRecord"}, {"class": "PortAnaRecord", "kwargs": {}}]})
    (1, {'class': 'PortAnaRecord', 'kwargs': {}})
    """
    records = task.get("record") or []
    records = [records] if isinstance(records, Mapping) else list(records)
    for i, record in enumerate(records):
        if _is_backtest_record(record):
            return i, dict(record)
    return None


def without_backtests(task: Mapping[str, Any]) -> dict:
    """``task`` without its backtest records: what a unit trains and records (the backtest runs per seed); a task
    without one is returned as it is.

    >>> without_backtests({"model": {}, "record": [{"class": "SignalRecord"}, {"class": "PortAnaRecord"}]})
    {'model': {}, 'record': [{'class': 'SignalRecord'}]}
    """
    out = dict(task)
    if "record" not in out:
        return out
    records = out["record"]
    records = [records] if isinstance(records, Mapping) else list(records or [])
    if not any(_is_backtest_record(r) for r in records):
        return out   # unchanged (the hash of a task without a backtest is what it was)
    out["record"] = [r for r in records if not _is_backtest_record(r)]
    return out


@dataclass(frozen=True)
class BacktestSpec:
    """One pipeline's backtest, resolved for the store (what runs once per seed; recorded in the manifest).

    Attributes
    ----------
    key : str
        Where it comes from: ``task.record.<i>.kwargs.config`` (the YAML's ``port_analysis_config``).
    record : str
        The record's class (``PortAnaRecord``).
    config : dict
        ``strategy``, ``executor`` and ``backtest`` keyword arguments as Qlib constructs them, the
        benchmark resolved, ``start_time``/``end_time`` left to the run (the schedule's test days).
    freq : str
        The report's frequency key (``1day``).
    benchmark : str
        The benchmark in words (``SH000300``, or ``the equal-weighted universe us25 (25 instruments)``).
    strategy : str
        The strategy in words (``TopkDropoutStrategy(topk=5, n_drop=1)``).
    cost : str
        The cost model in words (Qlib's exchange kwargs).
    notes : tuple of str
        What was resolved and why (a replaced benchmark, the backtest's dates), one line each.
    refused : str or None
        Why this backtest is not run (a strategy that holds the whole universe cannot tell models
        apart), naming the key and the fix; None: it runs.
    """

    key: str
    record: str
    config: dict
    freq: str
    benchmark: str
    strategy: str
    cost: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    refused: str | None = None

    def describe(self) -> str:
        """One line: strategy, benchmark and cost model (beside every backtest figure)."""
        return f"{self.strategy}; benchmark {self.benchmark}; cost {self.cost}"

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "record": self.record, "config": self.config, "freq": self.freq,
                "benchmark": self.benchmark, "strategy": self.strategy, "cost": self.cost, "notes": list(self.notes),
                "refused": self.refused}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BacktestSpec:
        return cls(key=str(data["key"]), record=str(data["record"]), config=dict(data["config"]),
                   freq=str(data["freq"]), benchmark=str(data["benchmark"]), strategy=str(data["strategy"]),
                   cost=str(data["cost"]), notes=tuple(data.get("notes") or ()), refused=data.get("refused"))


def _constructed(record: Mapping[str, Any]) -> tuple[dict, dict, dict, str]:
    """``(strategy, executor, backtest, freq)`` of a backtest record, as Qlib's record class constructs them."""
    cls = _record_class(record)
    if cls is None:
        from qlib.workflow.record_temp import PortAnaRecord as cls
    kwargs = {k: v for k, v in dict(record.get("kwargs") or {}).items() if k not in ("model", "dataset")}
    made = cls(recorder=None, **kwargs)   # the record's own defaults (config None: TopkDropoutStrategy, CSI300)
    return (copy.deepcopy(made.strategy_config), copy.deepcopy(made.executor_config),
            copy.deepcopy(made.backtest_config), made.all_freq[0] if made.all_freq else "1day")


def _words(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _strategy_words(strategy: Mapping[str, Any]) -> str:
    kwargs = {k: v for k, v in (strategy.get("kwargs") or {}).items() if k != "signal"}
    shown = ", ".join(f"{k}={_words(v)}" for k, v in kwargs.items())
    return f"{strategy.get('class', '?')}({shown})"


def _cost_words(backtest: Mapping[str, Any]) -> str:
    ex = dict(backtest.get("exchange_kwargs") or {})
    parts = []
    for key, name in (("open_cost", "open"), ("close_cost", "close")):
        if key in ex:
            parts.append(f"{name} {float(ex[key]):.4%}".replace("00%", "%"))
    if "min_cost" in ex:
        parts.append(f"min {_words(ex['min_cost'])} per trade")
    if "limit_threshold" in ex:
        parts.append(f"limit {ex['limit_threshold']}")
    if "deal_price" in ex:
        parts.append(f"deal at {ex['deal_price']}")
    return ", ".join(parts) or "Qlib's exchange defaults"


def _universe(task: Mapping[str, Any]) -> tuple[str, list[str]]:
    """``(name, instruments)`` of the task's universe (its handler's ``instruments``), read through Qlib."""
    from qlib.data import D

    market = (task.get("dataset") or {}).get("kwargs", {}).get("handler", {}).get("kwargs", {}).get("instruments", "all")
    if isinstance(market, str):
        return market, sorted(D.list_instruments(D.instruments(market), as_list=True))
    if isinstance(market, Sequence):
        return f"{len(market)} listed instruments", sorted(map(str, market))
    return "the handler's universe", sorted(D.list_instruments(D.instruments("all"), as_list=True))


def resolve_backtest(task: Mapping[str, Any], *, freq: str, where: str,
                     test_span: tuple[pd.Timestamp, pd.Timestamp] | None = None,
                     anchor: Callable[[str], str | None] | None = None) -> BacktestSpec | None:
    """The task's backtest resolved for this store (Qlib initialised on it), or ``None`` when it has none.

    Parameters
    ----------
    task : mapping
        A pipeline's Qlib task.
    freq : str
        The store's frequency: only ``day`` stores are backtested (``None`` is returned on others).
    where : str
        The file, for messages.
    test_span : (Timestamp, Timestamp), optional
        The schedule's first and last test session (a note says when the YAML's own dates differ).
    anchor : callable, optional
        ``anchor(key)``: the YAML anchor a dotted key of the task repeats (``port_analysis_config``),
        so messages name the key the user writes and ``--set`` reaches.

    A ``topk`` at least the universe's size (every model would hold the same portfolio) gives a
    spec whose ``refused`` names the key and the fix: the run trains, the backtest is not run.
    """
    from qlib.data import D

    found = backtest_record(task)
    if found is None or freq != "day":
        return None
    index, record = found
    name = str(record.get("class", "PortAnaRecord"))
    key = f"task.record.{index}.kwargs.config"
    def shown(sub: str) -> str:   # the key the user writes (through the YAML's anchors) for a key of the record
        full = f"{key}.{sub}"
        return (anchor(full) if anchor is not None else None) or full

    strategy, executor, backtest, report_freq = _constructed(record)
    backtest = dict(backtest)
    notes = []
    universe, members = _universe(task)
    have = set(D.list_instruments(D.instruments("all"), as_list=True))
    bench = backtest.get("benchmark", "SH000300")
    codes = [bench] if isinstance(bench, str) else list(bench) if isinstance(bench, (list, tuple)) else None
    if bench is None:
        bench_words = "none (the excess return is the strategy's return)"
    elif codes is not None and all(c in have for c in codes):
        bench_words = codes[0] if len(codes) == 1 else f"the equal-weighted {', '.join(codes)}"
    elif codes is not None:
        missing = [c for c in codes if c not in have]
        backtest["benchmark"] = list(members)
        bench_words = f"the equal-weighted universe {universe} ({len(members)} instruments)"
        notes.append(f"{shown('backtest.benchmark')}: {', '.join(map(str, missing))} is not an instrument of the "
                     f"store: the benchmark is {bench_words}, Qlib's mean of their daily close-to-close returns "
                     f"(--set {shown('backtest.benchmark')}=SYMBOL names one)")
    else:
        bench_words = f"{type(bench).__name__} given"
    refused = whole_universe(strategy, n=len(members), universe=universe, key=shown("strategy.kwargs"))
    own = (backtest.get("start_time"), backtest.get("end_time"))
    backtest["start_time"] = backtest["end_time"] = None   # the schedule's test days, per run
    if test_span is not None and any(v is not None for v in own):
        notes.append(f"{shown('backtest')}: runs over the schedule's test sessions {test_span[0].date()}..{test_span[1].date()}"
                     f" joined over its windows, not the YAML's {own[0]}..{own[1]} (one test segment)")
    config = {"strategy": strategy, "executor": executor, "backtest": backtest}
    return BacktestSpec(key=key, record=name, config=config, freq=report_freq, benchmark=bench_words,
                        strategy=_strategy_words(strategy), cost=_cost_words(backtest), notes=tuple(notes),
                        refused=refused)


def whole_universe(strategy: Mapping[str, Any], *, n: int, universe: str, key: str) -> str | None:
    """Why a strategy that holds the whole universe (``topk >= n``) is not backtested, or None.

    >>> print(whole_universe({"class": "TopkDropoutStrategy", "kwargs": {"topk": 50}}, n=25, universe="us25",
    ...                      key="port_analysis_config.strategy.kwargs"))
    port_analysis_config.strategy.kwargs.topk: TopkDropoutStrategy holds topk=50 stocks of the 25 instruments of us25: it holds the whole universe, so every model's portfolio is the same and the backtest cannot tell them apart (Qlib issue #1930); expected at most 24, e.g. --set port_analysis_config.strategy.kwargs.topk=5
    """
    topk = (strategy.get("kwargs") or {}).get("topk")
    if isinstance(topk, bool) or not isinstance(topk, (int, float)) or n == 0 or topk < n:
        return None
    name = strategy.get("class", "the strategy")
    return (f"{key}.topk: {name} holds topk={_words(topk)} stocks of the {n} instruments of {universe}: it holds the "
            f"whole universe, so every model's portfolio is the same and the backtest cannot tell them apart (Qlib "
            f"issue #1930); expected at most {n - 1}, e.g. --set {key}.topk={max(1, n // 5)}")


def run_backtest(qlib_init: Mapping[str, Any], predictions: pd.Series, spec: BacktestSpec, *,
                 start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
    """Qlib's backtest of ``spec`` on ``predictions`` (index ``datetime, instrument``) from ``start`` to ``end``.

    What ``PortAnaRecord._generate`` does with ``pred.pkl``: ``<PRED>`` filled with the
    predictions (a ``score`` column, as ``SignalRecord`` saves them), then
    ``qlib.backtest.backtest(executor=..., strategy=..., **backtest)``. Returns the daily report
    (:data:`BACKTEST_COLUMNS`; ``bench`` 0 when the backtest has no benchmark).
    """
    from qlib.backtest import backtest as qlib_backtest
    from qlib.utils import fill_placeholder

    from rolling_calib.qlib_adapter.session import init_qlib_once

    init_qlib_once(qlib_init)
    pred = predictions.rename("score").to_frame()
    placeholder = {"<PRED>": pred}
    strategy = fill_placeholder(copy.deepcopy(spec.config["strategy"]), placeholder)
    executor = fill_placeholder(copy.deepcopy(spec.config["executor"]), placeholder)
    kwargs = dict(copy.deepcopy(spec.config["backtest"]), start_time=pd.Timestamp(start), end_time=pd.Timestamp(end))
    with contextlib.redirect_stderr(io.StringIO()):   # Qlib's own "backtest loop" bar (the caller says what runs)
        portfolio, _ = qlib_backtest(executor=executor, strategy=strategy, **kwargs)
    if spec.freq not in portfolio:
        raise ValueError(f"{spec.key}: the backtest reported {', '.join(portfolio)}, not {spec.freq} "
                         "(the executor's generate_portfolio_metrics must be true)")
    report, _ = portfolio[spec.freq]
    return report_frame(report)


def report_frame(report: pd.DataFrame) -> pd.DataFrame:
    """Qlib's ``report_normal`` as :data:`BACKTEST_COLUMNS` (excess returns as ``PortAnaRecord`` computes them).

    >>> idx = pd.DatetimeIndex(["2017-01-03", "2017-01-04"], name="datetime")
    >>> r = pd.DataFrame({"return": [0.01, 0.0], "bench": [0.005, None], "cost": [0.001, 0.0], "turnover": [1.0, 0.0]},
    ...                  index=idx)
    >>> report_frame(r)[["excess_return", "excess_return_cost"]].round(4).values.tolist()
    [[0.005, 0.004], [0.0, 0.0]]
    """
    bench = report["bench"].astype(float).fillna(0.0) if "bench" in report else pd.Series(0.0, index=report.index)
    ret, cost = report["return"].astype(float), report["cost"].astype(float)
    out = pd.DataFrame({"date": pd.DatetimeIndex(report.index).normalize(), "return": ret.to_numpy(),
                        "bench": bench.to_numpy(), "cost": cost.to_numpy(),
                        "turnover": report["turnover"].astype(float).to_numpy() if "turnover" in report else math.nan})
    out["excess_return"] = out["return"] - out["bench"]
    out["excess_return_cost"] = out["return"] - out["bench"] - out["cost"]
    return out[list(BACKTEST_COLUMNS)].reset_index(drop=True)
