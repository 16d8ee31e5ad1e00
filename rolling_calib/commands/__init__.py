"""Sub-commands of the rolling-calib CLI, one module each (see rolling_calib.cli)."""
