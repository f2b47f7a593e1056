"""Where the client keeps its state: SPECSUBMIT_HOME, else the platform's data folder."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def state_home() -> Path:
    override = os.environ.get("SPECSUBMIT_HOME")
    home = Path(override) if override else Path(platformdirs.user_data_dir("specsubmit"))
    home.mkdir(parents=True, exist_ok=True)
    return home
