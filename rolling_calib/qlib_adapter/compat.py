"""Compatibility subclasses for Qlib models that are broken under the installed torch / NumPy or on our data.

Each one is the Qlib class with the smallest fix, selected automatically for a task that names
the Qlib class, and only when the installed versions provably hit the defect
(:func:`compat_substitute` measures it); the run's plan output and every unit's sidecar name it.

* :class:`DNNModelPytorch` (Qlib's MLP, ``qlib.contrib.model.pytorch_nn.DNNModelPytorch``):
  pyqlib 0.9.7 decides whether ``ReduceLROnPlateau`` still takes ``verbose`` by comparing
  version *strings* (``"2.13.0" <= "2.6.0"`` is true), so under torch >= 2.7, which removed
  the argument, its constructor raises ``TypeError`` (``qrun`` fails the same way). The subclass
  builds Qlib's default scheduler with the same settings, without ``verbose``. It also keeps
  Qlib's validation IC (``get_metric``, only logged: early stopping uses the validation loss)
  from stopping the run: Qlib's ``ICLoss`` skips days with fewer than 50 instruments and, when
  every day is skipped (a universe of 25 stocks), calls ``ipdb.set_trace()``; the subclass logs
  ``nan`` instead. Nothing else differs (the same seeding, network, optimiser, training and
  predictions).
* :class:`IGMTF` (``qlib.contrib.model.pytorch_igmtf.IGMTF``): to look up similar training days
  it keeps each day's hidden states in ``np.asarray(list_of_tensors, dtype=object)``, meant as a
  1-D array of tensors. When every training day has the same number of stocks (any balanced
  universe, such as 25 stocks listed throughout) NumPy builds a 3-D array of numbers instead, and
  ``torch.cat`` of its rows fails after the first epoch's training. The subclass builds the 1-D
  array of tensors Qlib meant; where Qlib's works (days of different sizes) both are the same.
"""

from __future__ import annotations

from typing import Any

from qlib.contrib.model import pytorch_igmtf, pytorch_nn

__all__ = ["COMPAT", "DNNModelPytorch", "IGMTF", "compat_substitute", "numpy_stacks_equal_tensors",
           "qlib_dnn_scheduler_broken"]


def _version_tuple(text: str) -> tuple[int, ...]:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``.

    >>> _version_tuple("2.13.0+cpu") > _version_tuple("2.6.0")
    True
    """
    parts = []
    for piece in text.split("+", 1)[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def qlib_dnn_scheduler_broken(torch_version: str | None = None) -> str | None:
    """Why Qlib's ``DNNModelPytorch`` cannot be built under ``torch_version`` (default: installed), or ``None``.

    >>> qlib_dnn_scheduler_broken("2.13.0+cpu") is not None, qlib_dnn_scheduler_broken("2.6.0")
    (True, None)
    """
    import torch

    version = torch_version or str(torch.__version__)
    qlib_passes_verbose = version.split("+", maxsplit=1)[0] <= "2.6.0"  # pyqlib 0.9.7's own test, verbatim
    if qlib_passes_verbose and _version_tuple(version) >= (2, 7):
        return (f"Qlib compares torch versions as strings ('{version.split('+')[0]}' <= '2.6.0' is true) and passes "
                f"verbose= to ReduceLROnPlateau, which torch 2.7 removed (installed: {version})")
    return None


class DNNModelPytorch(pytorch_nn.DNNModelPytorch):
    """Qlib's ``DNNModelPytorch`` whose default scheduler is built without ``verbose`` (see the module docstring)."""

    def __init__(self, *args: Any, scheduler: Any = "default", **kwargs: Any) -> None:
        super().__init__(*args, scheduler=None if scheduler == "default" else scheduler, **kwargs)
        if scheduler == "default":  # Qlib's default for torch >= 2.7, as its own else-branch writes it
            import torch

            self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
                self.train_optimizer, mode="min", factor=0.5, patience=10, threshold=0.0001, threshold_mode="rel",
                cooldown=0, min_lr=0.00001, eps=1e-08)

    def get_metric(self, pred: Any, target: Any, index: Any) -> Any:
        """Qlib's validation IC, or ``nan`` where Qlib's ``ICLoss`` would skip every day (and stop in ipdb)."""
        import pandas as pd
        import torch
        from qlib.contrib.meta.data_selection.utils import ICLoss

        per_day = pd.Series(1, index=index).groupby(level=0).size()
        if per_day.empty or int(per_day.max()) < ICLoss().skip_size:
            return torch.tensor(float("nan"))
        return super().get_metric(pred, target, index)


def numpy_stacks_equal_tensors() -> str | None:
    """Why Qlib's ``IGMTF`` fails on a balanced universe with the installed NumPy and torch, or ``None``.

    >>> numpy_stacks_equal_tensors() is None or "3-D" in numpy_stacks_equal_tensors()
    True
    """
    import numpy as np
    import torch

    stacked = np.asarray([torch.zeros(2, 3), torch.zeros(2, 3)], dtype=object)
    if stacked.ndim == 1:
        return None
    return (f"np.asarray of equal-shaped tensors with dtype=object is a {stacked.ndim}-D array of numbers (NumPy "
            f"{np.__version__}), not the 1-D array of tensors IGMTF indexes, when every day has the same number of "
            "stocks")


class IGMTF(pytorch_igmtf.IGMTF):
    """Qlib's ``IGMTF`` whose per-day hidden states are a 1-D array of tensors (see the module docstring)."""

    def get_train_hidden(self, x_train: Any) -> tuple[Any, Any]:
        """Each training day's hidden states (1-D object array of tensors) and their daily means (a tensor)."""
        import numpy as np
        import torch

        values = x_train.values
        starts, counts = self.get_daily_inter(x_train, shuffle=True)  # the same draws as Qlib's
        self.igmtf_model.eval()
        days = []
        for start, count in zip(starts, counts):
            feature = torch.from_numpy(values[start : start + count]).float().to(self.device)
            days.append(self.igmtf_model(feature, get_hidden=True).detach().cpu())
        hidden = np.empty(len(days), dtype=object)
        for i, day in enumerate(days):
            hidden[i] = day
        return hidden, torch.cat([day.mean(dim=0).unsqueeze(dim=0) for day in days])


#: Qlib class (dotted) -> (our module, our class, the check that says why it is needed).
COMPAT = {
    "qlib.contrib.model.pytorch_nn.DNNModelPytorch": (__name__, "DNNModelPytorch", qlib_dnn_scheduler_broken),
    "qlib.contrib.model.pytorch_igmtf.IGMTF": (__name__, "IGMTF", numpy_stacks_equal_tensors),
}


def compat_substitute(model_spec: dict) -> tuple[dict, str | None]:
    """``model_spec`` with a compatibility class where the installed versions break Qlib's; and the note.

    >>> spec = {"class": "LGBModel", "module_path": "qlib.contrib.model.gbdt", "kwargs": {}}
    >>> compat_substitute(spec) == (spec, None)
    True
    """
    dotted = f"{model_spec.get('module_path')}.{model_spec.get('class')}"
    entry = COMPAT.get(dotted)
    reason = entry[2]() if entry is not None else None
    if reason is None:
        return model_spec, None
    out = dict(model_spec, module_path=entry[0], **{"class": entry[1]})
    return out, f"{entry[0]}.{entry[1]} replaces {dotted}: {reason} (see {entry[0]})"
