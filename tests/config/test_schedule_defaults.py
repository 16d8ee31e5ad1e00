"""The schedule chosen for a Qlib workflow YAML without rolling: (issue 29), by hand."""

from __future__ import annotations

import pandas as pd

from rolling_calib.config.schedule_defaults import choose_schedule

CAL = pd.bdate_range("2013-02-08", "2018-02-07")          # the shared daily bars' span (business days here)
TASK = {"dataset": {"kwargs": {"segments": {"train": ["2008-01-01", "2014-12-31"], "valid": ["2015-01-01", "2016-12-31"],
                                            "test": ["2017-01-01", "2020-08-01"]}}},
        "model": {"kwargs": {"batch_size": 800}}}


def rows_of(n_instruments):
    return lambda lo, hi: n_instruments * len(pd.bdate_range(lo, hi))


def test_what_the_file_or_set_writes_is_kept():
    written = {"initial_train_start": "2014-01", "start": "2016-01", "end": "2016-06", "valid_months": 3,
               "mode": "finetune"}
    assert choose_schedule(written, TASK, CAL, can_finetune=False, rows=rows_of(25)).values == {}


def test_defaults_by_hand():
    c = choose_schedule({}, TASK, CAL, can_finetune=False, model_name="LSTM", rows=rows_of(25))
    # bar 60 after 2013-02-08 is 2013-05-03 -> the next month; the store's last bar 2018-02-07 (2 bars back: 02-05)
    # leaves February incomplete -> 2018-01; the YAML's test start 2017-01 has 3.5 years of training before it;
    # December 2016 has 22 business days x 25 = 550 < 800 rows, November + December 1,100 >= 800
    assert c.values == {"initial_train_start": "2013-06", "end": "2018-01", "start": "2017-01", "valid_months": 2,
                        "mode": "scratch"}
    assert len(c.notes) == 5 and c.notes[-1].startswith("mode scratch: LSTM can neither")
    wide = choose_schedule({}, TASK, CAL, can_finetune=True, rows=rows_of(40)).values   # 22 x 40 = 880 >= 800
    assert wide["valid_months"] == 1 and "mode" not in wide


def test_a_test_start_the_store_cannot_train_for_falls_back_to_two_thirds():
    short = pd.bdate_range("2013-02-08", "2015-03-31")
    c = choose_schedule({"seeds": 2}, TASK, short, can_finetune=True, rows=rows_of(6))
    # 2013-06 .. 2015-02 (the store's last complete month with labels: 03-31 is the last bar): 20 months -> +13
    assert (c.values["initial_train_start"], c.values["end"], c.values["start"]) == ("2013-06", "2015-02", "2014-07")
    assert "mode" not in c.values and "two thirds of the way from 2013-06 to 2015-02" in c.notes[2]


def test_a_qlib_workflow_follows_qlibs_rolling_unless_told():
    """Issue 39: retrain (not fine-tune), 20-day steps, the YAML's 2 years of validation; --set wins."""
    c = choose_schedule({}, TASK, CAL, can_finetune=True, rows=rows_of(25), qlib_rolling=True)
    assert (c.values["mode"], c.values["step_days"], c.values["valid_months"]) == ("scratch", 20, 24)
    assert any(n.startswith("valid_months 24: the YAML's valid segment 2015-01-01..2016-12-31 (24 months)")
               for n in c.notes)
    told = choose_schedule({"mode": "finetune", "step_months": 6, "valid_months": 1}, TASK, CAL, can_finetune=True,
                           rows=rows_of(25), qlib_rolling=True).values
    assert not {"mode", "step_days", "valid_months"} & set(told)
    own = choose_schedule({}, TASK, CAL, can_finetune=True, rows=rows_of(40)).values   # a file with rolling: ours
    assert "mode" not in own and "step_days" not in own and own["valid_months"] == 1
