"""The memory check every engine's pre-flight makes: what the models need against what
this machine has (RAM, unified on Apple, plus discrete GPU memory)."""

from __future__ import annotations

import os

from specschema import Fingerprint
from specsubmit.engines.base import RunListener
from specsubmit.errors import SpecSubmitError

__all__ = ["available_memory", "check_memory"]


def _physical_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def available_memory(fingerprint: Fingerprint) -> int | None:
    """RAM (unified on Apple) plus discrete GPU memory: what a model can spread over."""
    ram = fingerprint.memory_bytes or _physical_memory()
    if ram is None:
        return None
    if fingerprint.unified_memory:
        return ram
    return ram + sum(g.memory_bytes or 0 for g in fingerprint.gpus)


def check_memory(needed: int | None, available: int | None, assume_yes: bool,
                 listener: RunListener) -> None:
    if needed is None:
        return
    if available is None:
        listener.warning("could not read this machine's memory; skipping the memory check")
        return
    if needed <= available:
        return
    message = (f"the models need about {needed / 1e9:.1f} GB but this machine has "
               f"{available / 1e9:.1f} GB: expect swapping, slow trials or a failed load")
    if not assume_yes:
        raise SpecSubmitError(message + " (rerun with --yes to try anyway)")
    listener.warning(message)
