"""The Qlib adapter: the only layer that imports qlib or torch.

Qlib initialisation and calendar, workflow-YAML helpers that need Qlib (base-config
merging, class import and signature checks), task building for one rolling window,
unit training through Qlib's ``Model`` API, and our Qlib classes (``MinuteBarHandler``,
``MinuteTSDataset``, ``RollingLSTM``). May import ``rolling_calib.core`` and ``data_prep``.
"""

import contextlib as _contextlib
import io as _io


def _import_gym_quietly() -> None:
    """Import Gym once with its import-time notice swallowed.

    Qlib's strategy and record modules import ``qlib.rl``, which imports Gym 0.26; Gym prints a
    four-line "unmaintained, upgrade to Gymnasium" notice to stderr on import (``gym_notices``). We
    use no reinforcement learning, and the notice would otherwise lead every run's stderr (and break
    ``--json``'s clean streams). Warnings and errors of Gym itself are untouched.
    """
    with _contextlib.redirect_stderr(_io.StringIO()):
        try:
            import gym  # noqa: F401
        except ImportError:  # Qlib without its RL extras
            pass


_import_gym_quietly()
