"""Saved cost probes: one JSON file per probe under ``state_home()/probes/<probe_id>.json``,
written atomically like results."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from specschema.probe import CostProbe
from specsubmit.errors import ResultFileError
from specsubmit.local.atomicfile import atomic_write
from specsubmit.local.paths import state_home


def probes_dir() -> Path:
    folder = state_home() / "probes"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def save_probe(probe: CostProbe) -> Path:
    path = probes_dir() / f"{probe.probe_id}.json"
    try:
        atomic_write(path, probe.model_dump_json().encode("utf-8"))
    except OSError as exc:
        raise ResultFileError(f"cannot write the probe to {path}: {exc.strerror or exc}") \
            from None
    return path


def load_probe(path: Path) -> CostProbe:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ResultFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return CostProbe.model_validate_json(data)
    except ValidationError as exc:
        where = ".".join(str(p) for p in exc.errors()[0]["loc"])
        raise ResultFileError(f"{path} is not a specsubmit probe ({where}: "
                              f"{exc.errors()[0]['msg']})") from None


def _newest(wanted: Callable[[CostProbe], bool]) -> CostProbe | None:
    found = []
    for path in probes_dir().glob("*.json"):
        try:
            probe = load_probe(path)
        except ResultFileError:
            continue
        if wanted(probe):
            found.append(probe)
    return max(found, key=lambda p: p.created_at, default=None)


def newest_probe(target_digest: str | None) -> CostProbe | None:
    """The newest saved probe of this target (by digest); None when there is none."""
    if target_digest is None:
        return None
    return _newest(lambda probe: probe.target.digest == target_digest)


def newest_probe_named(names: set[str]) -> CostProbe | None:
    """The newest saved probe whose target's name or digest is one of ``names``."""
    return _newest(lambda probe: probe.target.name in names or probe.target.digest in names)
