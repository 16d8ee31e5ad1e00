"""The source's synthetic experiments (docs/method.md §3.1 linear, §3.2 logistic), vectorised over runs.

Each *round* draws one evaluation set (bias part + remaining part) and trains
``runs`` models of pipeline A (all ``dims`` features) and ``runs`` models of
pipeline B (the first ``features_b`` features), each on its own fresh training
set. Every model is scored three ways:

* ``vanilla`` -- the vanilla metric (QL or log loss) on the whole evaluation set;
* ``vanilla_remaining`` -- the vanilla metric on the remaining part only (same rows
  as the calibrated metric: the "fair" comparison of docs/method.md §2);
* ``calibrated`` -- the calibrated metric: bias fitted on the bias part, scored on
  the remaining part (CQL with the mean residual; CLL with the logit shift).

Per round: ``Acc_hat`` of each score over the ``runs x runs`` pairs (A is better
by construction), and the mean and sample standard deviation (ddof=1) of each
score over A's runs. Over rounds: mean and standard error of ``Acc_hat`` and the
averages of the means and standard deviations.

Vectorisation: all runs of a pipeline are fitted at once -- OLS by solving the
stacked normal equations ``(X_r^T X_r) w_r = X_r^T y_r`` with one batched
``numpy.linalg.solve``; logistic regression by batched Newton (IRLS) with
per-run backtracking. Predictions are ``(runs, n_eval)`` arrays. BLAS is held to
one thread while the rounds run (``threadpoolctl``): the many small stacked
products are several times faster that way.

Reproducibility: ``numpy.random.SeedSequence(seed).spawn(rounds)`` gives every
round its own generator, so round ``r`` has the same numbers whatever the number
of rounds requested, and the same seed gives the same tables. Draw order within
a round: evaluation features ``(n_bias + n_remaining, dims)``, evaluation labels,
then for pipeline A and then B: training features ``(runs, n_train, dims)`` and
training labels (B's models see only the first ``features_b`` columns).

Example
-------
>>> res = run_linear_experiment(rounds=2, runs=5, seed=1, n_train=50, n_bias=20, n_remaining=100)
>>> len(res.rounds), sorted(res.summary())[:3]
(2, ['acc_calibrated', 'acc_calibrated_se', 'acc_vanilla'])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import expit

from rolling_calib.core.pairwise import pairwise_accuracy, seed_budget
from rolling_calib.core.classification import fit_logit_shift_rows
from rolling_calib.core.validation import (
    FEATURES,
    REPEATS,
    SAMPLES,
    SEED,
    AllOf,
    Constraint,
    Interval,
    Worded,
    check,
    validate_params,
)
from rolling_calib.core.jsonable import jsonable

__all__ = [
    "SyntheticResult",
    "run_linear_experiment",
    "run_logistic_experiment",
    "fit_ols_batch",
    "fit_logistic_batch",
    "quadratic_scores",
    "log_loss_scores",
]

SCORES = ("vanilla", "vanilla_remaining", "calibrated")

#: Bytes of one round's float64 arrays (training features of every run, predictions, evaluation features).
MAX_ROUND_BYTES = 4 * 2**30
_FINITE = Worded(Interval(float, None, None), "a finite number")
_SPREAD = AllOf((_FINITE, Worded(Interval(float, 0, None), "a number >= 0")))
#: Declared constraints of the experiment parameters (``features_b <= dims`` and
#: ``n_train > dims + 1`` depend on ``dims`` and are checked per call).
PARAMETERS: dict[str, Constraint] = {
    "rounds": REPEATS,
    "runs": AllOf((REPEATS, Worded(Interval(int, 2, None), "at least 2 runs per pipeline (a standard deviation needs 2)"))),
    "seed": SEED,
    "dims": FEATURES,
    "features_b": FEATURES,
    "n_train": SAMPLES,
    "n_bias": SAMPLES,
    "n_remaining": SAMPLES,
    "beta": _FINITE,
    "x_mean": _FINITE,
    "x_std": _SPREAD,
    "noise_mean": _FINITE,
    "noise_std": _SPREAD,
    "l2": Worded(Interval(float, 0, None), "a finite number >= 0"),
}


# ---------------------------------------------------------------------------
# Batched model fitting
# ---------------------------------------------------------------------------
def _with_intercept(x: np.ndarray) -> np.ndarray:
    """Prepend a column of ones along the last axis."""
    ones = np.ones(x.shape[:-1] + (1,), dtype=np.float64)
    return np.concatenate([ones, x], axis=-1)


def fit_ols_batch(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Ordinary least squares with intercept for many training sets at once.

    Solves ``(Z_r^T Z_r) w_r = Z_r^T y_r`` with ``Z_r = [1, X_r]`` for every run ``r``.

    Parameters
    ----------
    x : ndarray of shape (runs, n, k)
    y : ndarray of shape (runs, n)

    Returns
    -------
    ndarray of shape (runs, k + 1): intercept first, then the ``k`` slopes.

    Example
    -------
    >>> x = np.array([[[0.0], [1.0], [2.0]]])
    >>> fit_ols_batch(x, np.array([[1.0, 3.0, 5.0]])).round(12).tolist()
    [[1.0, 2.0]]
    """
    z = _with_intercept(x)
    zt = np.swapaxes(z, 1, 2)
    gram = zt @ z
    rhs = zt @ y[..., None]
    return np.linalg.solve(gram, rhs)[..., 0]


def _logistic_objective(z: np.ndarray, w: np.ndarray, y: np.ndarray, penalty: np.ndarray) -> np.ndarray:
    """Per run: ``sum_i [log(1 + exp(s_ri)) - y_ri s_ri] + 1/2 sum_j penalty_j w_rj^2`` with ``s = Z w``."""
    s = (z @ w[..., None])[..., 0]
    return np.sum(np.logaddexp(0.0, s) - y * s, axis=1) + 0.5 * np.sum(penalty * w * w, axis=1)


@validate_params({"l2": PARAMETERS["l2"]})
def fit_logistic_batch(
    x: np.ndarray, y: np.ndarray, *, l2: float = 0.0, max_iter: int = 100, tol: float = 1e-10
) -> np.ndarray:
    """Logistic regression with intercept for many training sets at once (batched Newton / IRLS).

    Minimises, per run, ``sum_i [log(1 + exp(s_i)) - y_i s_i] + (l2 / 2) * ||beta||^2`` with
    ``s_i = b + x_i^T beta``; the intercept ``b`` is not penalised (scikit-learn's
    ``LogisticRegression(C=1/l2)``; ``l2=0`` is the unpenalised maximum-likelihood fit).
    Newton step ``w <- w - t H^{-1} g`` with ``g = Z^T (sigmoid(s) - y) + P w`` and
    ``H = Z^T diag(q (1 - q)) Z + P``; ``t`` is halved per run until the objective
    does not increase. Stops when every run's largest step is below ``tol * (1 + max|w|)``.

    Raises
    ------
    ValueError
        If ``l2`` is negative or some run does not converge in ``max_iter`` steps
        (unpenalised fits diverge on linearly separable training data: use ``l2 > 0``).

    Example
    -------
    >>> x = np.array([[[0.0], [0.0], [1.0], [1.0]]])
    >>> y = np.array([[0.0, 1.0, 1.0, 1.0]])   # x = 1 is always positive: no finite MLE, but with l2 > 0
    >>> fit_logistic_batch(x, y, l2=1.0).shape
    (1, 2)
    """
    z = _with_intercept(x)
    zt = np.swapaxes(z, 1, 2)
    runs, _, p = z.shape
    penalty = np.full(p, float(l2))
    penalty[0] = 0.0
    w = np.zeros((runs, p))
    objective = _logistic_objective(z, w, y, penalty)
    for _ in range(max_iter):
        s = (z @ w[..., None])[..., 0]
        q = expit(s)
        grad = (zt @ (q - y)[..., None])[..., 0] + penalty * w
        hess = zt @ (z * (q * (1.0 - q))[..., None]) + np.diag(penalty)
        try:
            step = np.linalg.solve(hess, grad[..., None])[..., 0]
        except np.linalg.LinAlgError:
            raise _not_converged(w, "the Newton system became singular") from None
        scale = np.ones(runs)
        candidate = w - step
        cand_obj = _logistic_objective(z, candidate, y, penalty)
        worse = cand_obj > objective + 1e-12 * np.abs(objective)
        for _ in range(40):
            if not worse.any():
                break
            idx = np.flatnonzero(worse)
            scale[idx] *= 0.5
            candidate[idx] = w[idx] - scale[idx, None] * step[idx]
            cand_obj[idx] = _logistic_objective(z[idx], candidate[idx], y[idx], penalty)
            worse[idx] = cand_obj[idx] > objective[idx] + 1e-12 * np.abs(objective[idx])
        moved = np.max(np.abs(candidate - w), axis=1)
        w, objective = candidate, cand_obj
        if np.all(moved <= tol * (1.0 + np.max(np.abs(w), axis=1))):
            return w
    raise _not_converged(w, f"no convergence in {max_iter} Newton steps")


def _not_converged(w: np.ndarray, reason: str) -> ValueError:
    """The error for a logistic fit without a finite optimum, naming the run with the largest coefficients."""
    worst = int(np.argmax(np.max(np.abs(w), axis=1)))
    return ValueError(
        f"x, y: logistic regression did not converge ({reason}); run {worst} has the largest "
        f"|coefficient| {np.max(np.abs(w[worst])):.3g}, so its training data may be separable -- "
        f"expected a finite maximum-likelihood fit, pass l2 > 0"
    )


# ---------------------------------------------------------------------------
# Batched scores
# ---------------------------------------------------------------------------
def quadratic_scores(predictions: np.ndarray, labels: np.ndarray, n_bias: int) -> dict[str, np.ndarray]:
    """QL (whole set), QL (remaining part) and CQL per run.

    ``predictions`` has shape (runs, n); the first ``n_bias`` columns are the bias
    part. ``c_r = mean_{i < n_bias} (y_i - p_ri)``, ``CQL_r = mean_{i >= n_bias} (y_i - p_ri - c_r)^2``.

    Example
    -------
    >>> s = quadratic_scores(np.zeros((1, 3)), np.array([2.0, 1.0, 3.0]), 1)
    >>> {k: float(v[0]) for k, v in s.items()}
    {'vanilla': 4.666666666666667, 'vanilla_remaining': 5.0, 'calibrated': 1.0}
    """
    residual = labels[None, :] - predictions
    bias = residual[:, :n_bias].mean(axis=1)
    rest = residual[:, n_bias:]
    return {
        "vanilla": np.mean(residual * residual, axis=1),
        "vanilla_remaining": np.mean(rest * rest, axis=1),
        "calibrated": np.mean((rest - bias[:, None]) ** 2, axis=1),
    }


def _pointwise_cross_entropy(s: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``log(1 + exp(s)) - y s`` elementwise (binary log loss from logits), as
    ``max(s, 0) + log1p(exp(-|s|)) - y s`` (stable, faster than ``logaddexp``)."""
    return np.maximum(s, 0.0) + np.log1p(np.exp(-np.abs(s))) - y * s


def log_loss_scores(logits: np.ndarray, labels: np.ndarray, n_bias: int) -> dict[str, np.ndarray]:
    """Log loss (whole set), log loss (remaining part) and calibrated log loss per run.

    ``logits`` has shape (runs, n); the first ``n_bias`` columns are the bias part.
    ``c_r`` solves ``sum_{i < n_bias} sigmoid(s_ri - c_r) = sum_{i < n_bias} y_i``;
    ``CLL_r`` is the log loss of ``sigmoid(s_ri - c_r)`` on the remaining part.

    Example
    -------
    >>> s = log_loss_scores(np.zeros((1, 3)), np.array([1.0, 0.0, 1.0]), 2)
    >>> round(float(s["calibrated"][0]), 6)   # c = 0: q = 1/2 -> log 2
    0.693147
    """
    c = fit_logit_shift_rows(logits[:, :n_bias], labels[:n_bias])
    loss = _pointwise_cross_entropy(logits, labels[None, :])
    n = logits.shape[1]
    rest_sum = loss[:, n_bias:].sum(axis=1)
    return {
        "vanilla": (loss[:, :n_bias].sum(axis=1) + rest_sum) / n,
        "vanilla_remaining": rest_sum / (n - n_bias),
        "calibrated": np.mean(_pointwise_cross_entropy(logits[:, n_bias:] - c[:, None], labels[None, n_bias:]), axis=1),
    }


# ---------------------------------------------------------------------------
# Rounds
# ---------------------------------------------------------------------------
def _draw_features(rng: np.random.Generator, shape: tuple[int, ...], params: dict[str, Any]) -> np.ndarray:
    return params["x_mean"] + params["x_std"] * rng.standard_normal(shape)


def _linear_round(rng: np.random.Generator, *, runs: int, params: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """One round of docs/method.md §3.1: per pipeline, the three scores of every run."""
    d, n_bias = params["dims"], params["n_bias"]
    beta = np.full(d, params["beta"])

    def labels(x: np.ndarray) -> np.ndarray:
        noise = params["noise_mean"] + params["noise_std"] * rng.standard_normal(x.shape[:-1])
        return x @ beta + noise

    x_eval = _draw_features(rng, (n_bias + params["n_remaining"], d), params)
    y_eval = labels(x_eval)
    out = {}
    for name, k in (("A", d), ("B", params["features_b"])):
        x = _draw_features(rng, (runs, params["n_train"], d), params)
        y = labels(x)
        w = fit_ols_batch(x[:, :, :k], y)
        pred = w[:, :1] + w[:, 1:] @ x_eval[:, :k].T
        out[name] = quadratic_scores(pred, y_eval, n_bias)
    return out


def _logistic_round(rng: np.random.Generator, *, runs: int, params: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """One round of docs/method.md §3.2: per pipeline, the three scores of every run."""
    d, n_bias = params["dims"], params["n_bias"]
    beta = np.full(d, params["beta"])

    def labels(x: np.ndarray) -> np.ndarray:
        prob = expit(x @ beta)
        return (rng.random(prob.shape) < prob).astype(np.float64)

    x_eval = _draw_features(rng, (n_bias + params["n_remaining"], d), params)
    y_eval = labels(x_eval)
    out = {}
    for name, k in (("A", d), ("B", params["features_b"])):
        x = _draw_features(rng, (runs, params["n_train"], d), params)
        y = labels(x)
        w = fit_logistic_batch(x[:, :, :k], y, l2=params["l2"])
        logits = w[:, :1] + w[:, 1:] @ x_eval[:, :k].T
        out[name] = log_loss_scores(logits, y_eval, n_bias)
    return out


def _summarize_round(scores: dict[str, dict[str, np.ndarray]]) -> dict[str, float]:
    """Acc of every score (A better) and A's mean and std (ddof=1) of every score."""
    row: dict[str, float] = {}
    for key in SCORES:
        row[f"acc_{key}"] = pairwise_accuracy(scores["A"][key], scores["B"][key])
    for key in SCORES:
        a = scores["A"][key]
        row[f"{key}_mean"] = float(a.mean())
        row[f"{key}_std"] = float(a.std(ddof=1)) if a.size > 1 else math.nan
    return row


# ---------------------------------------------------------------------------
# Result and drivers
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class SyntheticResult:
    """Outcome of a synthetic experiment.

    Attributes
    ----------
    experiment : str
        ``'linear'`` or ``'logistic'``.
    vanilla_name, calibrated_name : str
        Display names of the metrics (``'QL'``/``'CQL'`` or ``'LL'``/``'CLL'``).
    params : dict
        Every parameter used, seed included.
    rounds : pandas.DataFrame
        One row per round: ``round``, ``acc_vanilla``, ``acc_vanilla_remaining``,
        ``acc_calibrated`` and ``<score>_mean``/``<score>_std`` over pipeline A's runs.
    """

    experiment: str
    vanilla_name: str
    calibrated_name: str
    params: dict[str, Any]
    rounds: pd.DataFrame

    def summary(self) -> dict[str, float]:
        """Acc mean and standard error (ddof=1 std / sqrt(rounds)) per score, averages of A's means and stds,
        the std ratio calibrated/vanilla and the vanilla seed budget matching ``runs`` calibrated runs."""
        t = self.rounds
        n = len(t)
        out: dict[str, float] = {}
        for key in SCORES:
            acc = t[f"acc_{key}"].to_numpy()
            out[f"acc_{key}"] = float(acc.mean())
            out[f"acc_{key}_se"] = float(acc.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
            out[f"{key}_mean"] = float(t[f"{key}_mean"].mean())
            out[f"{key}_std"] = float(t[f"{key}_std"].mean())
        runs = int(self.params["runs"])
        for base in ("vanilla", "vanilla_remaining"):
            suffix = "" if base == "vanilla" else "_remaining"
            std_v, std_c = out[f"{base}_std"], out["calibrated_std"]
            out[f"std_ratio{suffix}"] = std_c / std_v if std_v > 0 else math.nan
            ok = all(math.isfinite(v) for v in (std_v, std_c)) and std_c > 0
            out[f"seed_budget{suffix}"] = seed_budget(std_v, std_c, runs) if ok else math.nan
        return out

    def to_dict(self) -> dict[str, Any]:
        """The summary keys, ``experiment``, the metric names and ``params`` (JSON-friendly; NaN -> None)."""
        summary = self.summary()
        return jsonable({
            "experiment": self.experiment,
            "vanilla_metric": self.vanilla_name,
            "calibrated_metric": self.calibrated_name,
            **summary,
            "rounds": int(self.params["rounds"]),
            "runs": int(self.params["runs"]),
            "seed": int(self.params["seed"]),
            "params": dict(self.params),
        })

    def format_table(self) -> str:
        """Readable table of the summary (what ``rolling-calib synthetic`` prints)."""
        s = self.summary()
        p = self.params
        v, c = self.vanilla_name, self.calibrated_name
        n_eval = p["n_bias"] + p["n_remaining"]
        title = {"linear": "linear regression (docs/method.md §3.1)", "logistic": "logistic regression (docs/method.md §3.2)"}
        lines = [
            f"Synthetic {title[self.experiment]}: {p['rounds']} rounds x {p['runs']} runs per pipeline, seed {p['seed']}",
            f"pipeline A: {p['dims']} features; pipeline B: first {p['features_b']}; A is better by construction",
            "",
            f"{'metric':<44}{'Acc (mean +- s.e.)':>22}{'A: mean':>12}{'A: std':>12}",
        ]
        rows = [
            (f"{v}, whole evaluation set ({n_eval} rows)", "vanilla"),
            (f"{v}, remaining part only ({p['n_remaining']} rows)", "vanilla_remaining"),
            (f"{c}, bias {p['n_bias']} / remaining {p['n_remaining']}", "calibrated"),
        ]
        for label, key in rows:
            acc = f"{s[f'acc_{key}']:.4f} +- {s[f'acc_{key}_se']:.4f}"
            lines.append(f"{label:<44}{acc:>22}{s[f'{key}_mean']:>12.4f}{s[f'{key}_std']:>12.5f}")
        lines += [
            "",
            f"std ratio {c}/{v}: {s['std_ratio']:.3f} (whole set), {s['std_ratio_remaining']:.3f} (remaining part)",
            f"seed budget: {v} needs {s['seed_budget']:.0f} runs (whole set) / {s['seed_budget_remaining']:.0f} "
            f"(remaining part) for the standard error {c} reaches with {p['runs']}",
        ]
        return "\n".join(lines)


def _run(
    experiment: str,
    round_fn: Callable[..., dict[str, dict[str, np.ndarray]]],
    params: dict[str, Any],
    *,
    progress: bool,
) -> SyntheticResult:
    _validate(params)
    from threadpoolctl import threadpool_limits
    from tqdm import tqdm

    children = np.random.SeedSequence(params["seed"]).spawn(params["rounds"])
    rows = []
    # Thousands of tiny stacked matrix products: one BLAS thread is many times faster than
    # several (thread start-up per product dominates, worse on a shared machine).
    with threadpool_limits(limits=1, user_api="blas"):
        for r, child in enumerate(tqdm(children, desc=f"synthetic {experiment}", unit="round", disable=not progress)):
            scores = round_fn(np.random.default_rng(child), runs=params["runs"], params=params)
            rows.append({"round": r, **_summarize_round(scores)})
    names = ("QL", "CQL") if experiment == "linear" else ("LL", "CLL")
    return SyntheticResult(
        experiment=experiment, vanilla_name=names[0], calibrated_name=names[1],
        params=dict(params), rounds=pd.DataFrame(rows),
    )


def _validate(params: dict[str, Any]) -> None:
    """Check the experiment parameters against :data:`PARAMETERS`; ``ValueError`` names the first bad one."""
    for name, constraint in PARAMETERS.items():
        if name in params:
            check(name, params[name], constraint)
    dims = params["dims"]
    check("features_b", params["features_b"], Worded(Interval(int, None, dims), f"at most dims={dims}"))
    check("n_train", params["n_train"], Worded(Interval(int, dims + 2, None), f"more than dims + 1 = {dims + 1} samples to fit"))
    runs, n_eval = params.get("runs", 1), params["n_bias"] + params["n_remaining"]
    arrays = 8 * (runs * params["n_train"] * dims + runs * n_eval + n_eval * dims)   # float64 per round
    if arrays > MAX_ROUND_BYTES:
        raise ValueError(f"runs x n_train x dims + runs x (n_bias + n_remaining): one round's arrays need "
                         f"{arrays / 2**30:.1f} GiB, expected at most {MAX_ROUND_BYTES / 2**30:.0f} GiB "
                         f"(runs={runs}, n_train={params['n_train']}, dims={dims}, n_eval={n_eval}); reduce one")


def run_linear_experiment(
    *,
    rounds: int = 100,
    runs: int = 100,
    seed: int = 0,
    dims: int = 20,
    features_b: int = 19,
    beta: float = 1.0,
    x_mean: float = -0.05,
    x_std: float = 0.25,
    noise_mean: float = 1.0,
    noise_std: float = 2.0,
    n_train: int = 1000,
    n_bias: int = 1000,
    n_remaining: int = 10000,
    progress: bool = False,
) -> SyntheticResult:
    """Synthetic linear regression, QL vs CQL (docs/method.md §3.1).

    ``X ~ N(x_mean, x_std^2 I_dims)``, ``Y = beta * sum_j X_j + eps``,
    ``eps ~ N(noise_mean, noise_std^2)`` (``noise_std`` is a standard deviation: the
    source's "Sigma_e = 2" read as in docs/method.md §3.1). OLS with intercept on
    ``n_train`` fresh samples per run; A uses all ``dims`` features, B the first
    ``features_b``. Evaluation set per round: ``n_bias`` + ``n_remaining`` rows.

    Returns
    -------
    SyntheticResult

    Example
    -------
    >>> r = run_linear_experiment(rounds=2, runs=4, n_train=60, n_bias=30, n_remaining=60, seed=3)
    >>> r.vanilla_name, r.params["noise_std"]
    ('QL', 2.0)
    """
    params = dict(rounds=rounds, runs=runs, seed=seed, dims=dims, features_b=features_b, beta=beta,
                  x_mean=x_mean, x_std=x_std, noise_mean=noise_mean, noise_std=noise_std,
                  n_train=n_train, n_bias=n_bias, n_remaining=n_remaining)
    return _run("linear", _linear_round, params, progress=progress)


def run_logistic_experiment(
    *,
    rounds: int = 100,
    runs: int = 100,
    seed: int = 0,
    dims: int = 20,
    features_b: int = 19,
    beta: float = 1.0,
    x_mean: float = -0.05,
    x_std: float = 0.25,
    l2: float = 0.0,
    n_train: int = 1000,
    n_bias: int = 2000,
    n_remaining: int = 10000,
    progress: bool = False,
) -> SyntheticResult:
    """Synthetic logistic regression, log loss vs calibrated log loss (docs/method.md §3.2).

    ``X ~ N(x_mean, x_std^2 I_dims)``, ``Y ~ Bernoulli(sigmoid(beta * sum_j X_j))``.
    Logistic regression with intercept fitted by maximum likelihood (``l2 = 0``,
    default) or with the penalty ``(l2 / 2) ||coefficients||^2`` (scikit-learn's
    ``C = 1 / l2``), batched Newton over runs. Evaluation set per round:
    ``n_bias`` + ``n_remaining`` rows (default 2,000 + 10,000).

    Example
    -------
    >>> r = run_logistic_experiment(rounds=2, runs=4, n_train=200, n_bias=100, n_remaining=100, seed=3)
    >>> r.calibrated_name, 0.0 <= r.summary()["acc_calibrated"] <= 1.0
    ('CLL', True)
    """
    params = dict(rounds=rounds, runs=runs, seed=seed, dims=dims, features_b=features_b, beta=beta,
                  x_mean=x_mean, x_std=x_std, l2=l2, n_train=n_train, n_bias=n_bias, n_remaining=n_remaining)
    return _run("logistic", _logistic_round, params, progress=progress)
