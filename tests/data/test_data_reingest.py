"""Re-ingesting data already in the store says how many bars were already stored (issue 30 item 5)."""

from __future__ import annotations

import json

from data_helpers import clean_day_rows, write_vendor_csv
from data_prep.ingest import IngestOptions, ingest
from rolling_calib.cli import main


def test_reingesting_the_same_file_counts_the_bars_already_stored(tmp_path, capsys):
    d1, d2 = clean_day_rows("2018-02-16", seed=1), clean_day_rows("2018-02-20", seed=2, price=100.0)
    first = write_vendor_csv(tmp_path / "one" / "AAPL.csv", d1)
    both = write_vendor_csv(tmp_path / "two" / "AAPL.csv", d1 + d2)
    store = tmp_path / "store"
    res = ingest([first], store, options=IngestOptions(mode="repair"))
    assert not res.appended and res.already_stored == 0
    again = ingest([first], store, options=IngestOptions(mode="repair"))
    assert again.appended and again.bars_written == 0 and again.already_stored == 390
    assert "appended 0 bars (0 new sessions; 390 already stored with the same values)" in again.summary_line()
    assert main(["data", "ingest", str(both), "--out", str(store), "--repair", "--no-progress", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["bars_written"], summary["bars_already_stored"], summary["new_sessions"]) == (390, 390, 1)
