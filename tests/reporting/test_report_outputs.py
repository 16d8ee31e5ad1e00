"""Report (HTML + Markdown) and the compare/report commands on a synthetic store."""

from __future__ import annotations

import base64
import json
import re
from html import unescape

import pandas as pd
import pytest

from rolling_calib.cli import main
from rolling_calib.analysis.comparison import compare_store
from rolling_calib.analysis.scoring import score_store
from rolling_calib.analysis.comparison import VERDICT_COLUMNS
from rolling_calib.core.tables import sig
from rolling_calib.reporting.document import CAVEAT, CSV_FILES, report_context, write_report
from rolling_calib.core.resampling import Resampling

from runner_helpers import write_fake_store

PIPES = {"calm": {"bias_sd": 0.2}, "wild": {"bias_sd": 2.0}}


@pytest.fixture(scope="module")
def fake_store(tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    write_fake_store(store, pipelines=PIPES, seeds=4)
    return store


@pytest.fixture(scope="module")
def written(fake_store, tmp_path_factory):
    """The report of the fake store with its diagnosis, as ``rolling-calib report`` writes it."""
    from rolling_calib.analysis.diagnostics import diagnose_store

    scores = score_store(fake_store)
    comparison = compare_store(scores, resampling=Resampling(n_boot=200))
    out = tmp_path_factory.mktemp("rep") / "report"
    paths = write_report(scores, comparison, out, diagnosis=diagnose_store(fake_store, scores=scores))
    return {"scores": scores, "comparison": comparison, "paths": paths, "out": out,
            "html": paths["html"].read_text(), "md": paths["markdown"].read_text()}


def test_write_report_is_self_contained_and_holds_the_numbers(written):
    html, md, comparison = written["html"], written["md"], written["comparison"]
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    figures = [k.removesuffix("_png") for k in written["paths"] if k.endswith("_png")]
    assert set(figures) == {"improvement", "when_0", "paired_0", "differential_0", "offsets", "spread", "bias"}
    assert len(images) == len(figures)
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    assert "<img" in html and 'src="http' not in html and "<script" not in html
    for name in figures:
        assert f"]({name}.png)" in md and (written["out"] / f"{name}.png").stat().st_size > 1000
    summary = comparison.summary.set_index("pipeline")
    for pipeline in PIPES:
        for column in ("ql_mean", "cql_mean", "cql_std", "ic_mean"):
            value = sig(summary.loc[pipeline, column], 3 if column.startswith("ic") else 4)
            assert value in html and value in md
    pair = comparison.pairs[0]
    acc = pair.accuracies["cql"]
    shown = f"{acc.accuracy:.3f} [{acc.ci_low:.3f}, {acc.ci_high:.3f}]" in md
    assert shown == (comparison.accuracies_shown(pair) is None)
    assert shown or f"not shown because {comparison.accuracies_shown(pair)}" in md
    assert "docs/method.md §4" in md and CAVEAT in md and CAVEAT in unescape(html)
    assert written["paths"]["runs_csv"].read_text().startswith("pipeline,seed,ql,ql_scored,cql,n_all,n_scored")


def _html_tables(html: str) -> list[list[str]]:
    """Every table of the HTML as its header cells, in document order."""
    return [[unescape(h) for h in re.findall(r"<th(?:\s[^>]*)?>(.*?)</th>", t, flags=re.S)]
            for t in re.findall(r"<table.*?</table>", html, flags=re.S)]


def test_the_report_opens_with_the_verdict_table(written):
    html, md, comparison = written["html"], written["md"], written["comparison"]
    assert _html_tables(html)[0] == list(VERDICT_COLUMNS.values())
    body = html[html.index("<body>"):]
    assert body.index("<h1>") < body.index("<table") < body.index("<h2>Warnings") if comparison.warnings else True
    first = comparison.verdict_rows()[0]
    first_row = re.search(r"<tbody>\s*<tr>(.*?)</tr>", html, flags=re.S).group(1)
    assert [unescape(c) for c in re.findall(r"<td(?:\s[^>]*)?>(.*?)</td>", first_row)] == \
        [first[k] for k in VERDICT_COLUMNS]
    # Markdown: the first table after the title is the verdicts too, with the label's unit on QL and CQL
    md_tables = [line for line in md.splitlines() if line.startswith("|")]
    assert [c.strip() for c in md_tables[0].strip("|").split("|")] == list(VERDICT_COLUMNS.values())
    assert md.index("## Verdicts") < md.index("## Losses per pipeline") < md.index("## Definitions")
    assert f"{first['difference']}" in md and first["difference"].endswith(comparison.label.loss_unit)
    assert md.index("## Ranking skill: IC and Rank IC") < md.index("## Losses per pipeline")


def test_no_markdown_and_no_absolute_path_in_the_html(written, fake_store):
    html = written["html"]
    text = re.sub(r'src="data:image/png;base64,[^"]+"', "", html)
    for marker in ("`", "**", "](", "## ", "*is*"):
        assert marker not in text, marker
    for absolute in (str(fake_store), str(fake_store.resolve()), str(written["out"]), "/tmp/"):
        assert absolute not in text and absolute not in written["md"]
    assert not re.search(r"(?<![\w.])/(?:home|tmp|work|root|usr|var)/", text)


def test_csv_links_exist_and_point_to_files_beside_the_report(written):
    html, md, out = written["html"], written["md"], written["out"]
    links = re.findall(r'<a href="([^"]+)">', html)
    assert links == list(CSV_FILES)
    for name in links:
        assert (out / name).is_file() and f"]({name})" in md
    verdicts = pd.read_csv(out / "verdicts.csv")
    pv = written["comparison"].verdicts[0]
    ql = verdicts[verdicts["metric"] == "ql"].iloc[0]
    assert ql["difference"] == pytest.approx(pv.verdicts["ql"].difference, rel=1e-12)
    assert ql["outcome"] == pv.verdicts["ql"].outcome and ql["unit"] == "bp²"
    assert list(pd.read_csv(out / "warnings.csv").columns) == ["kind", "pipelines", "message"]


def test_accuracies_are_replaced_by_the_reason_when_they_mean_nothing(written):
    comparison = written["comparison"]
    context = report_context(written["scores"], comparison, out_dir=written["out"])
    pair = comparison.pairs[0]
    why = comparison.accuracies_shown(pair)
    if why is None:
        assert context["accuracies"].rows[0][:2] == [pair.better, pair.worse] and not context["accuracies_hidden"]
    else:
        assert context["accuracies"] is None and why in context["accuracies_hidden"][0]


def test_compare_command_json(fake_store, capsys):
    assert main(["compare", "--store", str(fake_store), "--json", "--n-boot", "100"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {p["pipeline"] for p in data["pipelines"]} == set(PIPES)
    assert data["pairs"][0]["better"] == "calm"
    assert set(data["pairs"][0]["accuracies"]) == {"ql", "ql_scored", "cql", "ic", "icir", "rank_ic"}


def test_compare_command_table_and_pipeline_filter(fake_store, capsys):
    assert main(["compare", "--store", str(fake_store), "--pipelines", "calm", "wild", "--period", "week", "--n-boot", "50"]) == 0
    out = capsys.readouterr().out
    assert "calibration: week" in out and "Acc CQL" in out


def test_compare_command_bad_store_is_a_clear_error(tmp_path, capsys):
    assert main(["compare", "--store", str(tmp_path)]) == 2
    assert "no manifest" in capsys.readouterr().err


def test_report_command_writes_files(fake_store, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["report", "--store", str(fake_store), "--out", str(out), "--n-boot", "50"]) == 0
    assert (out / "report.html").is_file() and (out / "report.md").is_file()
    assert str(out / "report.html") in capsys.readouterr().out


def test_report_says_whether_calibration_can_help(fake_store, tmp_path):
    """The report carries each pipeline's seed-variance verdict, the same text `diagnose` prints."""
    from rolling_calib.analysis.diagnostics import diagnose_store

    out = tmp_path / "r"
    assert main(["report", "--store", str(fake_store), "--out", str(out), "--n-boot", "50"]) == 0
    md = (out / "report.md").read_text()
    assert "## Can calibration help here?" in md
    html = (out / "report.html").read_text()
    for d in diagnose_store(fake_store, resampling=Resampling(n_boot=50)).pipelines:   # the report's --n-boot too
        assert f"- {d.pipeline}: {d.assessment.text}" in md
        assert f"<strong>{d.pipeline}</strong>: {d.assessment.text}" in html.replace("&#39;", "'")
    assert "Can calibration help here?" in html


def test_the_report_opens_with_one_line_that_answers_and_no_store_line_inside_its_store(written, fake_store):
    """Issue 39: one line at the top (which configuration, by how much, how sure); a report written inside its
    store does not open its scope with "Store ..:"; one written elsewhere names the store."""
    comparison, html, md = written["comparison"], written["html"], written["md"]
    headline = comparison.headline()
    assert md.splitlines()[2] == f"**{headline}**"
    body = html[html.index("<body>"):]
    assert body.index("<h1>") < body.index('<p class="answer">') < body.index('<p class="scope">')
    assert f'<p class="answer">{headline}</p>' in unescape(html)
    assert "QL" in headline and "over seeds, on these" in headline and "95%" in headline
    inside = report_context(written["scores"], comparison, out_dir=fake_store / "report")["scope"]
    outside = report_context(written["scores"], comparison, out_dir=written["out"])["scope"]
    assert not inside.startswith("Store") and inside.startswith("8 runs of 2 pipeline(s)")
    assert outside.startswith("Store ") and outside.endswith(inside)


def test_the_report_says_when_each_pipeline_was_better(written):
    comparison, html, md = written["comparison"], written["html"], written["md"]
    pw = comparison.when[0]
    line = pw.whens["ql"].consistency()
    assert "## When was each better?" in md and line in md and line in unescape(html)
    assert md.index("## When was each better?") < md.index("## Losses per pipeline")
    assert f"### {pw.better} vs {pw.worse}: QL per refit window" in md and "](when_0.png)" in md
    for w in pw.whens["ql"].windows:
        assert f"{w.start}..{w.end} ({w.n_times})" in md
    when_csv = pd.read_csv(written["paths"]["when_csv"])
    assert set(when_csv["metric"]) == set(pw.whens) and {"start", "end", "outcome", "ci_low", "ci_high",
                                                         "level", "p_holm"} <= set(when_csv.columns)
    assert "Ibragimov-Mueller" in md and "Giacomini and Rossi 2010" in md


def test_the_report_says_how_far_the_market_time_part_sees(written):
    """Under the verdict table: the horizon line, from the future verdicts' own bandwidth and days (beside the
    period headline)."""
    from rolling_calib.analysis.comparison import horizon_note

    note = horizon_note(written["comparison"].verdicts)
    assert note.startswith("Horizon: the market-time part sees persistence up to ")
    assert note in written["md"] and note in unescape(written["html"])
    assert written["md"].index(note) < written["md"].index("## Losses per pipeline")
