"""Where a submission's free-text names are (``name_fields``: path, value and kind), the
same names read fast (``name_values``) and the chips' and models' alone
(``lookalike_fields``), and ``name_problem`` by kind, remembered: what the consistency
rule ``names_printable`` (``ingest.rules``) reads. Pure: the schema and ``ingest.names``.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

from specschema.models import Submission
from specserver.ingest.names import NAME_CACHE_SIZE, name_problem


def name_fields(submission: Submission) -> Iterator[tuple[str, str, str]]:
    """Every free-text name of a submission as (path, value, kind): kind is "chip" for a
    hardware name (also compared with the known chips' lookalikes), "model" for a model
    name (compared with the known models'), "note" for the note, else "name". Config
    names, models and options are the protocol's (configs_match_protocol) but are listed
    too: a name is refused for its characters before it is compared."""
    fp = submission.fingerprint
    cpu = fp.cpu
    for path, value, kind in (
        ("fingerprint.chip", fp.chip, "chip"), ("fingerprint.machine_model", fp.machine_model,
                                                "name"),
        ("fingerprint.cpu.brand_raw", cpu.brand_raw, "name"),
        ("fingerprint.cpu.name", cpu.name, "chip"), ("fingerprint.cpu.arch", cpu.arch, "name"),
        ("fingerprint.os.version", fp.os.version, "name"),
        ("fingerprint.os.arch", fp.os.arch, "name"),
        ("fingerprint.virtualization", fp.virtualization, "name"),
        ("engine.backend", submission.engine.backend, "name"),
        ("engine.build", submission.engine.build, "name"),
        ("client.name", submission.client.name, "name"), ("note", submission.note, "note"),
    ):
        if value is not None:
            yield path, value, kind
    for gi, gpu in enumerate(fp.gpus):
        for field, value, kind in (("name_raw", gpu.name_raw, "name"), ("name", gpu.name, "chip"),
                                   ("driver", gpu.driver, "name"),
                                   ("metal_family", gpu.metal_family, "name")):
            if value is not None:
                yield f"fingerprint.gpus.{gi}.{field}", value, kind
    for mi, model in enumerate(submission.models):
        for field, value, kind in (("name", model.name, "model"),
                                   ("quantization", model.quantization, "name"),
                                   ("parameter_size", model.parameter_size, "name"),
                                   ("family", model.family, "name")):
            if value is not None:
                yield f"models.{mi}.{field}", value, kind
    for key, value in submission.protocol.parameters.items():
        yield f"protocol.parameters.{key}", key, "name"
        yield f"protocol.parameters.{key}", value, "name"
    for ci, config in enumerate(submission.configs):
        yield f"configs.{ci}.name", config.name, "name"
        yield f"configs.{ci}.model", config.model, "model"
        if config.draft_model is not None:
            yield f"configs.{ci}.draft_model", config.draft_model, "model"
        for li, loaded in enumerate(config.speculation.models_loaded):
            yield f"configs.{ci}.speculation.models_loaded.{li}", loaded, "name"


def lookalike_fields(submission: Submission) -> Iterator[tuple[str, str, str]]:
    """The "chip" and "model" entries of ``name_fields`` (the names compared with the known
    ones even when printable ASCII); tests/server/ingest/test_ingest_fast.py holds them to
    ``name_fields``."""
    fp = submission.fingerprint
    if fp.chip is not None:
        yield "fingerprint.chip", fp.chip, "chip"
    if fp.cpu.name is not None:
        yield "fingerprint.cpu.name", fp.cpu.name, "chip"
    for gi, gpu in enumerate(fp.gpus):
        if gpu.name is not None:
            yield f"fingerprint.gpus.{gi}.name", gpu.name, "chip"
    for mi, model in enumerate(submission.models):
        yield f"models.{mi}.name", model.name, "model"
    for ci, config in enumerate(submission.configs):
        yield f"configs.{ci}.model", config.model, "model"
        if config.draft_model is not None:
            yield f"configs.{ci}.draft_model", config.draft_model, "model"


def name_values(submission: Submission) -> list[str]:
    """The values of ``name_fields``, read from the models' ``__dict__`` (no generator, no
    attribute hook): what ``names_printable`` tests first, walking ``name_fields`` only
    when a name is not printable ASCII. tests/server/ingest/test_ingest_fast.py holds the
    two to the same values."""
    d = vars(submission)
    fp = vars(d["fingerprint"])
    cpu = vars(fp["cpu"])
    os_info = vars(fp["os"])
    found = [fp["chip"], fp["machine_model"], cpu["brand_raw"], cpu["name"], cpu["arch"],
             os_info["version"], os_info["arch"], fp["virtualization"],
             vars(d["engine"])["backend"], vars(d["engine"])["build"], vars(d["client"])["name"],
             d["note"]]
    for gpu in fp["gpus"]:
        g = vars(gpu)
        found += (g["name_raw"], g["name"], g["driver"], g["metal_family"])
    for model in d["models"]:
        m = vars(model)
        found += (m["name"], m["quantization"], m["parameter_size"], m["family"])
    parameters = vars(d["protocol"])["parameters"]
    found += parameters.keys()
    found += parameters.values()
    for config in d["configs"]:
        c = vars(config)
        found += (c["name"], c["model"], c["draft_model"])
        found += vars(c["speculation"])["models_loaded"]
    return [v for v in found if v is not None]


@lru_cache(maxsize=NAME_CACHE_SIZE)
def name_problem_of(value: str, kind: str) -> str | None:
    """``name_problem`` by field kind, remembered: the chips and models of most submissions
    are a few, and their lookalike test (two ICU skeletons) was a third of this pass."""
    return name_problem(value, note=kind == "note", chip=kind == "chip", model=kind == "model")
