"""``rolling-calib data ...``: help texts, synth / ingest / info end to end, exit codes, --json."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from data_helpers import clean_day_rows, write_vendor_csv
from rolling_calib.cli import main


def _run(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv", [["data"], ["data", "synth"], ["data", "ingest"], ["data", "info"]])
def test_help_reads_well(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert "usage: rolling-calib data" in text and len(text.splitlines()) > 5


def test_data_group_without_subcommand_prints_help(capsys):
    code, out, _ = _run(["data"], capsys)
    assert code == 2 and "synth" in out and "ingest" in out


def test_synth_then_info_json(tmp_path, capsys):
    out_dir = tmp_path / "s"
    code, out, _ = _run(["data", "synth", "--out", str(out_dir), "--start", "2018-01-02", "--end", "2018-01-05",
                         "--symbols", "AAPL,F", "--seed", "4", "--no-progress", "--json"], capsys)
    summary = json.loads(out)
    assert code == 0 and summary["symbols"] == 2 and summary["sessions"] == 4 and summary["seed"] == 4
    code, out, _ = _run(["data", "info", str(out_dir), "--json"], capsys)
    info = json.loads(out)
    assert code == 0 and info["instruments"]["us25"] == ["AAPL", "F"] and info["calendar"]["bars"] == 4 * 390


def test_ingest_modes_and_exit_codes(tmp_path, capsys):
    rows = clean_day_rows("2018-02-16") + [("2018-02-16", "16:00:00", 1.0, 1.0, 1.0, 1.0, 10.0)]
    src = write_vendor_csv(tmp_path / "in" / "ZZ.csv", rows)
    code, _, err = _run(["data", "ingest", str(src), "--out", str(tmp_path / "a"), "--strict", "--no-progress"], capsys)
    assert code == 1 and f"{src}: line 392: field 'ToD'" in err
    code, _, err = _run(["data", "ingest", str(src), "--out", str(tmp_path / "b"), "--no-progress"], capsys)
    assert code == 1 and "closing_auction" in err and "nothing written" in err and not (tmp_path / "b").exists()
    report = tmp_path / "rep.json"
    code, out, _ = _run(["data", "ingest", str(tmp_path / "in"), "--out", str(tmp_path / "c"), "--repair",
                         "--report", str(report), "--no-progress", "--json"], capsys)
    summary = json.loads(out)
    assert code == 0 and summary["bars_written"] == 390 and summary["rows_dropped"] == 1
    assert json.loads(report.read_text())["counts"]["ZZ"] == {"closing_auction": 1}


def test_data_command_module_imports_stay_light():
    # the command module must not import heavy libraries at import time (handlers import them)
    code = ("import sys, argparse, data_prep.cli as c; c.register(argparse.ArgumentParser().add_subparsers()); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'qlib', 'torch', 'polars', 'pandas', 'numpy'}))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "[]"


def test_bad_input_is_one_clear_error_line_not_a_traceback(tmp_path, capsys):
    code, _, err = _run(["data", "ingest", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "s"),
                         "--no-progress"], capsys)
    assert code == 1 and err.startswith("error: ") and "expected an existing file or directory" in err
    code, _, err = _run(["data", "synth", "--out", str(tmp_path / "x"), "--start", "2018-02-01", "--end", "2018-01-01",
                         "--no-progress"], capsys)
    assert code == 2 and "end: expected a date on or after start" in err
    code, _, err = _run(["data", "info", str(tmp_path / "nothing")], capsys)
    assert code == 1 and "calendars/1min.txt" in err


def test_info_plot_draws_the_store(tmp_path, capsys):
    from data_prep.plots import store_profiles

    out_dir = tmp_path / "s"
    assert _run(["data", "synth", "--out", str(out_dir), "--start", "2018-01-02", "--end", "2018-02-28",
                 "--symbols", "AAPL,KO", "--no-progress"], capsys)[0] == 0
    png = tmp_path / "plots" / "store.png"
    code, out, _ = _run(["data", "info", str(out_dir), "--plot", str(png)], capsys)
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and str(png) in out
    prof = store_profiles(out_dir)
    assert prof["daily_close"].shape == (21 + 19, 2) and np.allclose(prof["daily_close"].iloc[0], 1.0)
    assert prof["abs_return"][1] > 2 * np.nanmedian(prof["abs_return"][150:240])  # U-shape, open side
    assert prof["volume"][389] > 2.0  # U-shape, close side (midday = 1)
