"""Synthetic experiments (docs/method.md §3.1/§3.2): batched fits against scikit-learn, a per-run loop
reference for whole rounds, determinism and the CLI."""

from __future__ import annotations

import doctest
import json

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.metrics import log_loss as sk_log_loss
from sklearn.metrics import mean_squared_error

from rolling_calib.core import classification as C
from rolling_calib.core import metrics as M
from rolling_calib.simulation import synthetic_experiments as S
from rolling_calib.cli import main
from rolling_calib.core.pairwise import pairwise_accuracy

SMALL = dict(n_train=120, n_bias=80, n_remaining=200)


def test_docstring_examples_run():
    result = doctest.testmod(S, raise_on_error=False)
    assert result.attempted >= 8
    assert result.failed == 0


def test_fit_ols_batch_matches_sklearn():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 60, 5))
    y = x @ np.arange(1.0, 6.0) + 2.0 + rng.normal(size=(4, 60))
    w = S.fit_ols_batch(x, y)
    for r in range(4):
        ref = LinearRegression().fit(x[r], y[r])
        np.testing.assert_allclose(w[r], np.r_[ref.intercept_, ref.coef_], rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("l2", [0.0, 2.0])
def test_fit_logistic_batch_matches_sklearn(l2):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 300, 4))
    y = (rng.random((3, 300)) < expit(x @ np.array([1.0, -0.5, 0.3, 0.0]) - 0.4)).astype(float)
    w = S.fit_logistic_batch(x, y, l2=l2)
    for r in range(3):
        ref = LogisticRegression(C=np.inf if l2 == 0 else 1.0 / l2, tol=1e-12, max_iter=10_000).fit(x[r], y[r])
        np.testing.assert_allclose(w[r], np.r_[ref.intercept_, ref.coef_[0]], atol=1e-5)
        # first-order optimality of our fit, to machine precision
        s = w[r, 0] + x[r] @ w[r, 1:]
        grad = np.r_[np.sum(expit(s) - y[r]), x[r].T @ (expit(s) - y[r]) + l2 * w[r, 1:]]
        assert np.max(np.abs(grad)) < 1e-8


def test_fit_logistic_batch_reports_separable_data():
    x = np.array([[[-1.0], [-0.5], [0.5], [1.0]]])
    y = np.array([[0.0, 0.0, 1.0, 1.0]])
    with pytest.raises(ValueError, match=r"did not converge .* may be separable .* pass l2 > 0"):
        S.fit_logistic_batch(x, y)
    assert np.all(np.isfinite(S.fit_logistic_batch(x, y, l2=0.1)))
    with pytest.raises(ValueError, match=r"l2: expected a finite number >= 0, found -1"):
        S.fit_logistic_batch(x, y, l2=-1)


def test_batched_scores_match_the_scalar_metrics_and_sklearn():
    rng = np.random.default_rng(2)
    n_bias = 30
    pred = rng.normal(size=(5, 100))
    y = rng.normal(0.3, size=100)
    q = S.quadratic_scores(pred, y, n_bias)
    mask = np.arange(100) < n_bias
    for r in range(5):
        assert q["vanilla"][r] == pytest.approx(mean_squared_error(y, pred[r]), rel=1e-12)
        assert q["vanilla_remaining"][r] == pytest.approx(mean_squared_error(y[~mask], pred[r, ~mask]), rel=1e-12)
        assert q["calibrated"][r] == pytest.approx(M.calibrated_quadratic_loss(pred[r], y, bias_part=mask), rel=1e-12)
    logits = rng.normal(size=(5, 100))
    labels = (rng.random(100) < 0.4).astype(float)
    labels[:2] = [0.0, 1.0]
    ll = S.log_loss_scores(logits, labels, n_bias)
    for r in range(5):
        assert ll["vanilla"][r] == pytest.approx(sk_log_loss(labels, expit(logits[r]), labels=[0, 1]), rel=1e-10)
        assert ll["calibrated"][r] == pytest.approx(
            C.calibrated_log_loss(logits[r], labels, bias_part=mask, from_logits=True), rel=1e-12)


def _loop_round(seed_seq, *, runs, params, logistic):
    """Per-run reference with scikit-learn, drawing in the documented order:
    evaluation features, evaluation labels, then per pipeline (A, B): training features, training labels."""
    rng = np.random.default_rng(seed_seq)
    d, nb = params["dims"], params["n_bias"]
    beta = np.full(d, 1.0)

    def feats(shape):
        return -0.05 + 0.25 * rng.standard_normal(shape)

    def labels(x):
        if logistic:
            prob = expit(x @ beta)
            return (rng.random(prob.shape) < prob).astype(float)
        return x @ beta + 1.0 + 2.0 * rng.standard_normal(x.shape[:-1])

    x_eval = feats((nb + params["n_remaining"], d))
    y_eval = labels(x_eval)
    mask = np.arange(len(y_eval)) < nb
    scores = {}
    for name, k in (("A", d), ("B", params["features_b"])):
        x = feats((runs, params["n_train"], d))
        y = labels(x)
        out = {"vanilla": [], "vanilla_remaining": [], "calibrated": []}
        for r in range(runs):
            if logistic:
                model = LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000).fit(x[r, :, :k], y[r])
                p = model.predict_proba(x_eval[:, :k])[:, 1]
                out["vanilla"].append(sk_log_loss(y_eval, p, labels=[0, 1]))
                out["vanilla_remaining"].append(sk_log_loss(y_eval[~mask], p[~mask], labels=[0, 1]))
                out["calibrated"].append(C.calibrated_log_loss(p, y_eval, bias_part=mask))
            else:
                p = LinearRegression().fit(x[r, :, :k], y[r]).predict(x_eval[:, :k])
                out["vanilla"].append(mean_squared_error(y_eval, p))
                out["vanilla_remaining"].append(mean_squared_error(y_eval[~mask], p[~mask]))
                out["calibrated"].append(M.calibrated_quadratic_loss(p, y_eval, bias_part=mask))
        scores[name] = {key: np.array(v) for key, v in out.items()}
    row = {f"acc_{key}": pairwise_accuracy(scores["A"][key], scores["B"][key]) for key in S.SCORES}
    for key in S.SCORES:
        row[f"{key}_mean"] = scores["A"][key].mean()
        row[f"{key}_std"] = scores["A"][key].std(ddof=1)
    return row


@pytest.mark.parametrize("logistic", [False, True])
def test_rounds_match_a_per_run_sklearn_loop(logistic):
    runs = 6
    params = dict(dims=20, features_b=19, n_train=400, n_bias=300, n_remaining=300)
    run = S.run_logistic_experiment if logistic else S.run_linear_experiment
    result = run(rounds=2, runs=runs, seed=7, **params)
    children = np.random.SeedSequence(7).spawn(2)
    for r in range(2):
        ref = _loop_round(children[r], runs=runs, params=params, logistic=logistic)
        got = result.rounds.iloc[r]
        for key, value in ref.items():
            # acc values are exact unless two runs differ by less than the fits' disagreement (~1e-7)
            assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key


def test_same_seed_same_tables_and_round_prefix():
    a = S.run_linear_experiment(rounds=3, runs=4, seed=5, **SMALL)
    b = S.run_linear_experiment(rounds=3, runs=4, seed=5, **SMALL)
    pd.testing.assert_frame_equal(a.rounds, b.rounds, check_exact=True)
    assert a.to_dict() == b.to_dict()
    longer = S.run_linear_experiment(rounds=5, runs=4, seed=5, **SMALL)
    pd.testing.assert_frame_equal(a.rounds, longer.rounds.iloc[:3], check_exact=True)
    other = S.run_linear_experiment(rounds=3, runs=4, seed=6, **SMALL)
    assert not a.rounds.equals(other.rounds)
    lg1 = S.run_logistic_experiment(rounds=2, runs=3, seed=5, n_train=200, n_bias=100, n_remaining=100)
    lg2 = S.run_logistic_experiment(rounds=2, runs=3, seed=5, n_train=200, n_bias=100, n_remaining=100)
    pd.testing.assert_frame_equal(lg1.rounds, lg2.rounds, check_exact=True)


def test_pipeline_a_is_ranked_better_and_summary_is_consistent():
    # a dropped feature worth a lot (beta = 3, so B loses 9 * x_std^2 = 0.56 of signal): Acc well above 1/2
    res = S.run_linear_experiment(rounds=4, runs=10, seed=0, beta=3.0, n_train=200, n_bias=200, n_remaining=1000)
    s = res.summary()
    assert s["acc_vanilla"] > 0.9 and s["acc_calibrated"] > 0.9
    t = res.rounds
    assert s["acc_calibrated_se"] == pytest.approx(t["acc_calibrated"].std(ddof=1) / 2)
    assert s["calibrated_std"] == pytest.approx(t["calibrated_std"].mean())
    assert s["seed_budget"] == pytest.approx(10 * (s["vanilla_std"] / s["calibrated_std"]) ** 2)
    # QL level of OLS with intercept: E[QL] = sigma^2 (1 + (d + 1) / (n - d - 2)) = 4 (1 + 21 / 178) ~ 4.47;
    # the evaluation noise of 1,200 rows x 4 rounds moves the average by ~0.08 (1 s.d.)
    assert s["vanilla_mean"] == pytest.approx(4 * (1 + 21 / 178), abs=0.3)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"runs": 1}, r"runs: expected at least 2 runs"),
        ({"features_b": 21}, r"features_b: expected at most dims=20, found 21"),
        ({"n_train": 10}, r"n_train: expected more than dims \+ 1 = 21"),
        ({"x_std": -1.0}, r"x_std: expected a number >= 0"),
        ({"rounds": 0}, r"rounds: expected an integer in \[1, 1000000\] \(repetitions: time grows with it\), found int 0"),
        ({"seed": -3}, r"seed: expected a non-negative integer seed below 2\*\*32"),
        ({"noise_std": float("nan")}, r"noise_std: expected a finite number"),
    ],
)
def test_bad_parameters_are_named(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        S.run_linear_experiment(**{"rounds": 1, "runs": 2, **SMALL, **kwargs})


def test_cli_json_table_and_csv(capsys, tmp_path):
    argv = ["synthetic", "logistic", "--rounds", "2", "--runs", "3", "--seed", "4", "--n-train", "150",
            "--n-bias", "100", "--n-remaining", "100", "--l2", "0.5", "--no-progress", "--json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    required = {"acc_vanilla", "acc_vanilla_se", "acc_vanilla_remaining", "acc_vanilla_remaining_se", "acc_calibrated",
                "acc_calibrated_se", "vanilla_mean", "vanilla_std", "calibrated_mean", "calibrated_std"}
    assert required <= set(first)
    assert first["params"]["l2"] == 0.5 and first["seed"] == 4 and first["rounds"] == 2
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == first          # same seed, same numbers
    csv = tmp_path / "sub" / "rounds.csv"
    assert main(["synthetic", "linear", "--rounds", "2", "--runs", "3", "--n-train", "100", "--n-bias", "50",
                 "--n-remaining", "50", "--rounds-csv", str(csv), "--plot", str(tmp_path / "fig.png")]) == 0
    out = capsys.readouterr()
    assert "CQL, bias 50 / remaining 50" in out.out and "Acc (mean +- s.e.)" in out.out
    assert "synthetic linear" in out.err                           # the progress bar goes to stderr
    table = pd.read_csv(csv)
    assert list(table["round"]) == [0, 1] and not list(csv.parent.glob(".*tmp"))
    assert (tmp_path / "fig.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not list(tmp_path.glob(".*tmp"))


def test_cli_reports_bad_parameters(capsys):
    assert main(["synthetic", "linear", "--rounds", "1", "--runs", "2", "--features-b", "25", "--no-progress"]) == 2
    assert "features_b: expected at most dims=20, found 25" in capsys.readouterr().err
