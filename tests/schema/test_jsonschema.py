"""The published JSON Schema files are generated from the models and must be current."""

from pathlib import Path

from specschema.jsonschema_export import generated_files

FOLDER = Path(__file__).resolve().parents[2] / "schema" / "jsonschema"


def test_committed_schema_files_are_current() -> None:
    for name, text in generated_files().items():
        committed = (FOLDER / name).read_text(encoding="utf-8")
        assert committed == text, (
            f"{name} is stale: run `python -m specschema.jsonschema_export schema/jsonschema`"
        )
