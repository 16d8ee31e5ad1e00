"""Qlib's model zoo under the rolling schedule: every benchmark workflow of a Qlib checkout, run end to end.

Reads every ``examples/benchmarks/**/workflow_config*.yaml`` of a Qlib repository (a checkout, or
a git directory read with ``git show``; their sibling files come along: ``multi_freq_handler.py``,
``tft.py``, ...), wraps each in a small YAML that points it at a daily store and adds a rolling
schedule, runs ``rolling-calib run`` on it in its own process (a crash of one workflow is that
row's outcome), and writes a table into ``workflows/qlib_zoo/README.md`` (between the
``zoo-matrix`` markers): YAML, validates, runs, CPU seconds, IC, outcome.

Not part of CI (an hour or more on 2 cores). Get Qlib's repository at the commit the table
names with::

    git clone https://github.com/microsoft/qlib && git -C qlib checkout d5379c52

and run (the daily store: ``rolling-calib data ingest ../shared/data/us-equities-daily-2013-2018
--out qlib_data/us25_day``)::

    nice -n 15 python bench/zoo_matrix.py --qlib-repo qlib --store qlib_data/us25_day --out bench_out/zoo
    python bench/zoo_matrix.py ... --only workflow_config_tcts_Alpha360   # re-run some rows
    python bench/zoo_matrix.py ... --table-only                           # rewrite the table from OUT/matrix.json

Every row runs the same schedule: 1 seed, 1 window (train 2014-01..2016-12, validation
2017-01..06, test 2017-07..12), the universe ``all`` (the store's 25 stocks; the workflows say
csi300/csi500), ``mode: scratch``, and minimal training set with ``--set`` (named per row in
the table: ``n_epochs=2``, ``num_boost_round=50``, ...). A model whose validation pass drops an
incomplete batch gets ``batch_size=2048`` when its own batch exceeds the validation rows (else
the run refuses it before training, as it should); on a machine without a GPU CatBoost's
``bootstrap_type: Poisson`` (GPU-only, refused before training on CPU) becomes ``Bernoulli``
(named in the row). The two ``multi_freq`` workflows need a day
and a one-minute store of the same market: no real minute bars overlap the real daily store,
so they run on a synthetic market at both frequencies (``data synth`` minutes for the same 25
symbols, and day bars aggregated from those same minutes, ingested with ``data ingest``), so
that the day label and the minute features describe the same prices.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
README = REPO / "workflows" / "qlib_zoo" / "README.md"
BEGIN, END = "<!-- zoo-matrix:begin -->", "<!-- zoo-matrix:end -->"
SCHEDULE = {"initial_train_start": "2014-01", "start": "2017-07", "end": "2017-12", "step_months": 6,
            "valid_months": 6, "mode": "scratch", "seeds": 1}
#: Minimal training: constructor arguments set per row where the model class takes them by name.
MINIMAL = {"n_epochs": 2, "pretrain_n_epochs": 2, "max_steps": 40, "num_boost_round": 50, "epochs": 20,
           # TCTS retrains with a new seed until its validation loss beats this (0.993 in Qlib: never, in 2 epochs)
           "lowest_valid_performance": 10.0}
SMALL_BATCH = 2048
#: Written values this machine's libraries refuse, with the replacement the refusal names (CatBoost's Poisson
#: bootstrap is GPU-only: the run refuses it before training on CPU; the row runs Bernoulli and says so).
CPU_FIXES = {"bootstrap_type": ("Poisson", "Bernoulli")}


# --------------------------------------------------------------------------- the benchmark files
def benchmark_files(repo: Path, dest: Path) -> tuple[str, list[Path]]:
    """Copy ``examples/benchmarks`` of a Qlib checkout or git directory into ``dest``; (commit, workflow files)."""
    prefix = "examples/benchmarks"
    if (repo / prefix).is_dir():  # a checkout
        commit = _git(repo, "rev-parse", "HEAD", git_dir=False).strip() if (repo / ".git").exists() else "unknown"
        shutil.copytree(repo / prefix, dest / prefix, dirs_exist_ok=True)
    else:  # a (bare) git directory
        commit = _git(repo, "rev-parse", "HEAD").strip()
        for name in _git(repo, "ls-tree", "-r", "--name-only", "HEAD", prefix).splitlines():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(subprocess.run(["git", "--git-dir", str(repo), "show", f"HEAD:{name}"],
                                              capture_output=True, check=True).stdout)
    files = sorted((dest / prefix).glob("**/workflow_config*.yaml"))
    return commit, files


def _git(repo: Path, *args: str, git_dir: bool = True) -> str:
    where = ["--git-dir", str(repo)] if git_dir else ["-C", str(repo)]
    return subprocess.run(["git", *where, *args], capture_output=True, text=True, check=True).stdout


# --------------------------------------------------------------------------- the multi-frequency market
def synthetic_stores(out: Path, symbols: list[str]) -> tuple[Path, Path]:
    """A synthetic minute store and the day store aggregated from its bars (built once, reused)."""
    minute, day = out / "synth_1min", out / "synth_day"
    if not (minute / "COMMITTED").exists():
        # to 2018-03: the labels of the last test sessions (Ref($close, -2)) need bars after the test ends
        _cli("data", "synth", "--out", str(minute), "--start", "2013-06-01", "--end", "2018-03-31",
             "--symbols", ",".join(symbols), "--no-progress")
    if not (day / "COMMITTED").exists():
        csv = out / "synth_day_csv"
        csv.mkdir(parents=True, exist_ok=True)
        for symbol, frame in _daily_bars(minute, symbols).items():
            frame.to_csv(csv / f"{symbol}.csv", index=False)
        _cli("data", "ingest", str(csv), "--out", str(day), "--repair")
    return day, minute


def _daily_bars(minute: Path, symbols: list[str]) -> dict[str, pd.DataFrame]:
    """Each symbol's day bars from the minute store (first open, max high, min low, last close, summed volume)."""
    import qlib
    from qlib.data import D

    qlib.init(provider_uri={"1min": str(minute)}, region="us", kernels=1, logging_level="WARNING")
    fields = ["$open", "$high", "$low", "$close", "$volume"]
    out = {}
    for symbol in symbols:
        bars = D.features([symbol], fields, freq="1min").droplevel("instrument").dropna(subset=["$close"])
        days = bars.groupby(bars.index.normalize())
        out[symbol] = pd.DataFrame({"date": days.size().index.strftime("%Y-%m-%d"),
                                    "open": days["$open"].first().to_numpy(), "high": days["$high"].max().to_numpy(),
                                    "low": days["$low"].min().to_numpy(), "close": days["$close"].last().to_numpy(),
                                    "volume": days["$volume"].sum().to_numpy()})
    return out


def _cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "rolling_calib.cli", *args], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL)


# --------------------------------------------------------------------------- one row
def row_settings(path: Path) -> dict[str, object]:
    """The ``--set`` overrides of one row: universe ``all`` and minimal training (see the module docstring)."""
    from rolling_calib.config.experiment import load_yaml
    from rolling_calib.qlib_adapter.task_spec import accepted_kwargs, import_class
    from rolling_calib.qlib_adapter.zoo import partial_batch_evidence

    task = load_yaml(path)["task"]
    out: dict[str, object] = {"task.dataset.kwargs.handler.kwargs.instruments": "all"}
    try:
        cls = import_class(task["model"], "task.model", str(path))
    except Exception:  # noqa: BLE001 -- the run itself reports why the class cannot be imported
        return out
    named = accepted_kwargs(cls).params
    kwargs = task["model"].get("kwargs", {})
    for name, value in MINIMAL.items():
        if name in named or name in kwargs:
            out[f"task.model.kwargs.{name}"] = value
    for name, (written, replacement) in CPU_FIXES.items():
        if kwargs.get(name) == written and not _has_gpu():
            out[f"task.model.kwargs.{name}"] = replacement
    batch = kwargs.get("batch_size", getattr(named.get("batch_size"), "default", None))
    if isinstance(batch, int) and batch > SMALL_BATCH and partial_batch_evidence(cls):
        out["task.model.kwargs.batch_size"] = SMALL_BATCH
    return out


def _has_gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def wrapper(path: Path, stores: dict[str, Path]) -> Path:
    """The two-line wrapper of a benchmark workflow: its store(s) and the rolling schedule."""
    raw = yaml.safe_load(path.read_text())
    uri = raw.get("qlib_init", {}).get("provider_uri")
    multi = isinstance(uri, dict) and "1min" in uri
    provider = {"day": str(stores["synth_day"]), "1min": str(stores["synth_1min"])} if multi \
        else {"day": str(stores["day"])}
    doc = {"BASE_CONFIG_PATH": path.name, "qlib_init": {"provider_uri": provider, "region": "us"},
           "rolling": dict(SCHEDULE)}
    out = path.with_name(f"rc_{path.stem}.yaml")
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def run_row(path: Path, stores: dict[str, Path], out: Path, *, timeout: int) -> dict:
    """Run one workflow through ``rolling-calib run`` in its own process; the row of the table."""
    name = path.stem
    store = out / "stores" / name
    shutil.rmtree(store, ignore_errors=True)
    sets = row_settings(path)
    cmd = [sys.executable, "-m", "rolling_calib.cli", "run", str(wrapper(path, stores)), "--store", str(store),
           "--no-tracking", "--json"] + [f"--set={k}={v}" for k, v in sets.items()]
    t0 = time.perf_counter()
    with open(out / "logs" / f"{name}.stderr", "w") as err:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, _ = proc.communicate()
    usage = _child_cpu()
    stderr = (out / "logs" / f"{name}.stderr").read_text()
    row = {"yaml": name, "dir": path.parent.name, "rc": proc.returncode, "wall_s": round(time.perf_counter() - t0, 1),
           "cpu_s": usage, "settings": {k: v for k, v in sets.items() if "instruments" not in k}}
    row.update(_outcome(proc.returncode, stdout, stderr, store))
    return row


_CPU = {"last": 0.0}


def _child_cpu() -> float:
    """CPU seconds (user + system) of the child processes finished since the last call."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    spent, _CPU["last"] = total - _CPU["last"], total
    return round(spent, 1)


def _outcome(code: int, stdout: str, stderr: str, store: Path) -> dict:
    if code == 0:
        summary = json.loads(stdout)
        ic, spread = _ic(store)
        return {"validates": True, "runs": True, "outcome": "ran end to end", "ic": ic, "prediction_std": spread,
                "units": summary["units_ran"], "notes": summary.get("notes", [])}
    marker = "rolling-calib run: error: "
    at = stderr.rfind(marker)
    message = stderr[at + len(marker):] if at >= 0 else (stderr.strip().splitlines() or [f"exit {code}"])[-1]
    message = " ".join(message.split())
    if code == 2 and not any(store.glob("units/*/seed*/w*.log")):  # no unit started: refused by the plan
        return {"validates": False, "runs": False, "outcome": "refused before training", "reason": message}
    return {"validates": True, "runs": False, "outcome": "failed after the plan" if code in (1, 2) else f"killed ({code})",
            "reason": message[-600:]}


def _ic(store: Path) -> tuple[float | None, float | None]:
    """Mean daily Pearson correlation of prediction and label over the row's test units, and the predictions' std.

    ``(None, std)`` when the predictions are constant (the correlation is undefined).
    """
    frames = [pd.read_parquet(p) for p in sorted(store.glob("units/*/seed*/w[0-9][0-9].parquet"))]
    if not frames:
        return None, None
    frame = pd.concat(frames)
    spread = float(frame["prediction"].std())
    if not spread > 0:
        return None, spread
    daily = frame.groupby("datetime")[["prediction", "label"]].apply(
        lambda g: g["prediction"].corr(g["label"]) if len(g) > 2 and g["prediction"].std() > 0 else np.nan)
    return round(float(daily.mean()), 4), spread


def refresh_metrics(rows: dict[str, dict], out: Path) -> None:
    """IC and prediction spread of every row that ran, read again from its store."""
    for name, row in rows.items():
        if row["runs"]:
            row["ic"], row["prediction_std"] = _ic(out / "stores" / name)


# --------------------------------------------------------------------------- the table
def table(rows: dict[str, dict], commit: str) -> str:
    """The Markdown table and its totals."""
    ran = [r for r in rows.values() if r["runs"]]
    refused = [r for r in rows.values() if r["outcome"] == "refused before training"]
    failed = [r for r in rows.values() if not r["runs"] and r not in refused]
    cpu = sum(r["cpu_s"] for r in rows.values())
    lines = [
        f"Qlib commit `{commit[:8]}`, {len(rows)} workflows: **{len(ran)} ran end to end**, {len(refused)} refused "
        f"before training, {len(failed)} failed after the plan; {cpu / 60:.0f} CPU-minutes in all "
        f"(generated by `bench/zoo_matrix.py` on {pd.Timestamp.now():%Y-%m-%d}).",
        "",
        "| YAML | validates | runs | CPU-s | IC | outcome | minimal training (`--set task.model.kwargs.`) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in sorted(rows, key=str.lower):
        r = rows[name]
        ic = "" if r.get("ic") is None else f"{r['ic']:+.4f}"
        if r["runs"] and r.get("prediction_std") == 0:
            ic = "n/a: constant predictions"
        outcome = r["outcome"] + (f": {_cell(_short(r['reason'], name))}" if r.get("reason") else "")
        if r.get("notes"):
            outcome += " (" + "; ".join(_cell(_short(n, name)) for n in r["notes"]) + ")"
        sets = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in r["settings"].items())
        lines.append(f"| `{r['dir']}/{name}` | {'yes' if r['validates'] else 'no'} | {'yes' if r['runs'] else 'no'} "
                     f"| {r['cpu_s']:.0f} | {ic} | {outcome} | {sets} |")
    return "\n".join(lines)


def _short(text: str, name: str) -> str:
    """A message without the wrapper's path and pipeline name (``.../rc_NAME.yaml: pipelines.rc_NAME: ``)."""
    for prefix in (f"rc_{name}.yaml: ", f"pipelines.rc_{name}: ", f"rc_{name}: "):
        at = text.find(prefix)
        if at >= 0:
            text = text[at + len(prefix):]
    return text


def _cell(text: str) -> str:
    return " ".join(str(text).replace("|", "/").split())


def write_readme(text: str, readme: Path = README) -> None:
    """Replace the generated section of the README (between the markers)."""
    doc = readme.read_text()
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    readme.write_text(doc[:start] + "\n" + text + "\n" + doc[end:])


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--qlib-repo", required=True, type=Path, help="Qlib checkout or git directory")
    p.add_argument("--store", required=True, type=Path, help="the daily Qlib store (data ingest of the daily bars)")
    p.add_argument("--out", required=True, type=Path, help="work directory: benchmark files, stores, logs, results")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these workflows (file stems); others kept")
    p.add_argument("--timeout", type=int, default=3600, help="seconds per workflow (default 3600)")
    p.add_argument("--readme", type=Path, default=README, help="README whose generated section is rewritten")
    p.add_argument("--table-only", action="store_true", help="only rewrite the README's table from OUT/matrix.json")
    args = p.parse_args(argv)
    out = args.out.resolve()
    if args.table_only:
        done = json.loads((out / "matrix.json").read_text())
        refresh_metrics(done["rows"], out)
        write_readme(table(done["rows"], done["commit"]), args.readme)
        return 0
    (out / "logs").mkdir(parents=True, exist_ok=True)
    commit, files = benchmark_files(args.qlib_repo.resolve(), out / "qlib")
    results_path = out / "matrix.json"
    rows = json.loads(results_path.read_text())["rows"] if results_path.is_file() else {}
    chosen = [f for f in files if not args.only or f.stem in args.only]
    symbols = sorted(line.split("\t")[0] for line in (args.store / "instruments" / "all.txt").read_text().splitlines())
    stores = {"day": args.store.resolve()}
    for path in chosen:
        if "1min" in str((yaml.safe_load(path.read_text()).get("qlib_init") or {}).get("provider_uri")):
            stores["synth_day"], stores["synth_1min"] = synthetic_stores(out, symbols)
            break
    _child_cpu()
    for i, path in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {path.stem} ...", end=" ", flush=True)
        rows[path.stem] = run_row(path, stores, out, timeout=args.timeout)
        print(f"{rows[path.stem]['outcome']} ({rows[path.stem]['cpu_s']:.0f} CPU-s)", flush=True)
        results_path.write_text(json.dumps({"commit": commit, "rows": rows}, indent=1, default=str))
    text = table(rows, commit)
    write_readme(text, args.readme)
    print(text.splitlines()[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
