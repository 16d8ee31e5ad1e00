"""Every public function's declared constraints are applied, with the declared message (scikit-learn's pattern).

scikit-learn's ``tests/test_public_functions.py`` enumerates the public functions decorated with
``validate_params`` and checks that each rejects an invalid value of every declared parameter.
Here: every public function of ``rolling_calib`` that carries declared constraints
(:func:`rolling_calib.core.validation.validate_params`) is called once per declared parameter
with a value the constraint rejects, the others given a valid value (or a placeholder the check
never reaches), and must raise ``ValueError`` with the one message format
``"<name>: expected <what the constraint describes>, found <value>"`` -- before its body runs.

A second test asks that every public function taking a bootstrap, question or stopping setting
declares its constraint: a function with a ``resampling``, ``question``, ``rule`` or ``confidence``
parameter and no declared constraint for it would take any value.

The values that carry settings (:class:`~rolling_calib.core.resampling.Resampling`,
:class:`~rolling_calib.core.question.Question`, :class:`~rolling_calib.core.stopping.StoppingRule`,
:class:`~rolling_calib.experiment.until_decided.UntilDecided`) declare a constraint per field
(``CONSTRAINTS``): each is made once per field with a value the constraint rejects and must raise
the declared message too.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import rolling_calib
from rolling_calib.core.question import Question
from rolling_calib.core.resampling import Resampling
from rolling_calib.core.stopping import StoppingRule
from rolling_calib.core.validation import explain

#: Modules not imported here: their imports pull a heavy optional dependency (Qlib, torch, MLflow,
#: matplotlib, Ray) or start work; the constraint checks of those layers have tests of their own.
HEAVY = ("rolling_calib.qlib_adapter", "rolling_calib.model", "rolling_calib.dataset", "rolling_calib.tracking",
         "rolling_calib.reporting", "rolling_calib.execution.ray_executor", "rolling_calib.cli",
         "rolling_calib.experiment", "rolling_calib.__main__")
#: Values tried, in order, to find one a constraint rejects and one it accepts.
CANDIDATES = (object(), "not-an-option", -(10 ** 12), 10 ** 12, -1.5, float("nan"), float("inf"), True, None, 0, 1,
              2, 0.5, 1.0, 2.5, 1000, "month", "pooled", "previous", "error", "lower", "future", Resampling(),
              Question(), StoppingRule())


def _modules():
    for info in pkgutil.walk_packages(rolling_calib.__path__, "rolling_calib."):
        if not info.name.startswith(HEAVY):
            yield importlib.import_module(info.name)


def _public_functions():
    seen = {}
    for module in _modules():
        for name, obj in vars(module).items():
            if name.startswith("_") or not inspect.isfunction(obj) or not obj.__module__.startswith("rolling_calib"):
                continue
            seen[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return seen


FUNCTIONS = _public_functions()
DECLARED = {k: f for k, f in FUNCTIONS.items() if getattr(f, "__rc_constraints__", None)}
CASES = [(k, param) for k, f in sorted(DECLARED.items()) for param in f.__rc_constraints__]


def _invalid(constraint):
    return next(v for v in CANDIDATES if not constraint.accepts(v))


def _valid(constraint):
    inner = getattr(constraint, "constraint", constraint)   # a Worded constraint's options are its inner one's
    values = getattr(constraint, "values", ()) or getattr(inner, "values", ())
    return next(v for v in (*values, *CANDIDATES) if constraint.accepts(v))


def test_the_walk_found_the_declared_functions():
    """The enumeration is not empty: it finds the bootstrap entry points (a walk that found nothing would pass)."""
    assert {"rolling_calib.core.verdict.decide", "rolling_calib.analysis.comparison.compare_store",
            "rolling_calib.core.pairwise.pairwise_accuracy_ci", "rolling_calib.analysis.diagnostics.diagnose_store",
            "rolling_calib.core.ranking.pairwise_matrix"} <= set(DECLARED)
    assert len(CASES) >= 20


@pytest.mark.parametrize("qualname, param", CASES, ids=[f"{k.rsplit('.', 1)[-1]}-{p}" for k, p in CASES])
def test_every_declared_parameter_rejects_an_invalid_value_with_the_declared_message(qualname, param):
    func = DECLARED[qualname]
    constraints = func.__rc_constraints__
    signature = inspect.signature(func)
    args, kwargs = [], {}
    for p in signature.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name == param:
            value = _invalid(constraints[param])
        elif p.name in constraints:
            value = _valid(constraints[p.name])
        elif p.default is p.empty:
            value = None   # a placeholder: the constraints are checked before the body could use it
        else:
            continue
        if p.kind == p.POSITIONAL_ONLY or (p.kind == p.POSITIONAL_OR_KEYWORD and p.default is p.empty):
            args.append(value)
        else:
            kwargs[p.name] = value
    bad = _invalid(constraints[param])
    message = f"{param}: {explain(bad, constraints[param])}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        func(*args, **kwargs)


def test_every_function_taking_bootstrap_settings_declares_their_constraints():
    """A public function with a ``resampling``, ``question``, ``rule`` or ``confidence`` parameter checks it
    (declared, not retyped)."""
    undeclared = []
    for qualname, func in sorted(FUNCTIONS.items()):
        params = set(inspect.signature(func).parameters) & {"resampling", "question", "rule", "confidence", "n_boot",
                                                            "block_size"}
        missing = params - set(getattr(func, "__rc_constraints__", {}))
        if missing:
            undeclared.append(f"{qualname}: {sorted(missing)}")
    assert not undeclared, "parameters without a declared constraint:\n" + "\n".join(undeclared)


def test_a_resampling_value_is_checked_where_it_is_made():
    """The bootstrap settings are checked once, when the value is made; the bound on replicates is named."""
    with pytest.raises(ValueError, match=r"^n_boot: expected a positive int <= 100000 \(the replicates are held in "
                                         r"memory\), found 1000000000$"):
        Resampling(n_boot=10 ** 9)
    with pytest.raises(ValueError, match=r"^confidence: expected a number strictly between 0 and 1, found 1\.0$"):
        Question(confidence=1.0)
    with pytest.raises(ValueError, match=r"^block_size: expected None or a mean block length >= 1"):
        Resampling(block_size=0.5)


def _value_classes():
    from rolling_calib.experiment.until_decided import UntilDecided   # heavy: imported here only

    return [Resampling, Question, StoppingRule, UntilDecided]


VALUE_CASES = [(cls, name) for cls in _value_classes() for name in cls.CONSTRAINTS]


@pytest.mark.parametrize("cls, field", VALUE_CASES, ids=[f"{c.__name__}-{f}" for c, f in VALUE_CASES])
def test_every_field_of_a_settings_value_rejects_an_invalid_value_with_the_declared_message(cls, field):
    """scikit-learn's check for classes: each declared field, given a value its constraint rejects, is refused
    when the value is made, with ``"<field>: expected <description>, found <value>"``."""
    constraint = cls.CONSTRAINTS[field]
    bad = _invalid(constraint)
    message = f"{field}: {explain(bad, constraint)}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        cls(**{field: bad})


def test_every_field_of_a_settings_value_is_declared():
    """No field without a declared constraint: the value checks all it carries."""
    import dataclasses

    for cls in _value_classes():
        assert {f.name for f in dataclasses.fields(cls)} == set(cls.CONSTRAINTS), cls.__name__


def test_a_stopping_rule_is_checked_as_a_whole_and_refuses_an_infinite_margin():
    """Beside each field: the budget is at least the first look's seeds; ``--margin inf`` is refused."""
    with pytest.raises(ValueError, match=r"^max_seeds: expected an integer >= first \(5\), found 4$"):
        StoppingRule(first=5, max_seeds=4)
    for margin in (float("inf"), float("nan"), 0.0, -1.0):
        with pytest.raises(ValueError, match=r"^margin: expected None or a finite number > 0"):
            StoppingRule(margin=margin)
    with pytest.raises(ValueError, match=r"^first: expected an integer in \[2, 10000\]"):
        StoppingRule(first=1)
    assert StoppingRule(first=2, max_seeds=2, margin=0.5).margin == 0.5
