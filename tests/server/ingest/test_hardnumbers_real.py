"""The real, published Hard Numbers file imports and reproduces the seed article's table.

Fixture: tests/server/data/hardnumbers_spec_decode_m2.json, byte for byte the file
spec-decode-m2/results/spec_decode.json of Pitambarmahato/hardnumbers-experiments at commit
f7bf2baaa46b164689859c6dd53395aaeb17a184 (see the .provenance file next to it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specserver.ingest import hardnumbers

FIXTURE = Path(__file__).parents[1] / "data" / "hardnumbers_spec_decode_m2.json"
PROVENANCE = FIXTURE.with_name(FIXTURE.name + ".provenance")
ARGS: dict[str, Any] = {"chip": "Apple M2", "memory_gb": 24, "ollama_version": "0.12.8",
                        "os_name": "macos", "source": "hardnumbers-experiments spec-decode-m2"}


def build(content: bytes) -> hardnumbers.Imported:
    return hardnumbers.build_submission(content, **ARGS)


def test_the_fixture_is_the_published_file_unchanged() -> None:
    recorded = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip()
                for line in PROVENANCE.read_text().splitlines() if ":" in line}
    assert recorded["path"] == "spec-decode-m2/results/spec_decode.json"
    assert len(recorded["commit"]) == 40
    assert hashlib.sha256(FIXTURE.read_bytes()).hexdigest() == recorded["sha256"]
    data = json.loads(FIXTURE.read_bytes())
    assert data["target"] == "qwen3:14b (Q4_K_M, 9.3 GB)"
    assert data["drafts"] == ["qwen2.5:0.5b (397 MB)", "qwen2.5:1.5b (~1 GB)"]


def test_import_reproduces_the_articles_table() -> None:
    imported = build(FIXTURE.read_bytes())
    by_name = {s.name: s for s in imported.summaries}
    names = ("no_draft", "draft_qwen2.5_0.5b", "draft_qwen2.5_1.5b")
    assert [f"{by_name[n].median_tps:.3f}" for n in names] == ["3.990", "3.788", "3.580"]
    assert [f"{by_name[n].speedup_tps:.3f}" for n in names[1:]] == ["0.949", "0.897"]
    assert [f"{by_name[n].median_eval_s:.1f}" for n in names] == ["50.1", "52.8", "55.9"]
    assert [by_name[n].trials for n in names] == [5, 5, 5]
    drafts = [c for c in imported.submission.configs if c.role == "draft"]
    assert [c.speculation.observed for c in drafts] == ["not_applied", "not_applied"]
    # Neither interval excludes 1.0: the article's "5 % / 10 % slower" is within the noise.
    for name in names[1:]:
        low, high = by_name[name].speedup_tps_ci_low, by_name[name].speedup_tps_ci_high
        assert low is not None and high is not None and low < 1.0 < high


def test_the_size_and_quantization_go_to_the_models_and_the_note() -> None:
    submission = build(FIXTURE.read_bytes()).submission
    models = {m.name: (m.quantization, m.size_bytes) for m in submission.models}
    assert models == {"qwen3:14b": ("Q4_K_M", 9_300_000_000),
                      "qwen2.5:0.5b": (None, 397_000_000),
                      "qwen2.5:1.5b": (None, 1_000_000_000)}
    assert [c.model for c in submission.configs] == ["qwen3:14b"] * 3
    assert [c.draft_model for c in submission.configs] == [None, "qwen2.5:0.5b", "qwen2.5:1.5b"]
    assert submission.note is not None
    assert "qwen3:14b (Q4_K_M, 9.3 GB), qwen2.5:0.5b (397 MB), qwen2.5:1.5b (~1 GB)" in (
        submission.note)


@pytest.mark.parametrize(("text", "name", "quantization", "size"), [
    ("qwen3:14b (Q4_K_M, 9.3 GB)", "qwen3:14b", "Q4_K_M", 9_300_000_000),
    ("qwen2.5:0.5b (397 MB)", "qwen2.5:0.5b", None, 397_000_000),
    ("qwen2.5:1.5b (~1 GB)", "qwen2.5:1.5b", None, 1_000_000_000),
    ("qwen3:14b", "qwen3:14b", None, None),
    ("  gpt-oss:20b (MXFP4) ", "gpt-oss:20b", "MXFP4", None),
    ("qwen3:14b ()", "qwen3:14b", None, None),
])
def test_model_labels_parse(text: str, name: str, quantization: str | None,
                            size: int | None) -> None:
    label = hardnumbers.parse_model_label(text, "target")
    assert (label.name, label.quantization, label.size_bytes) == (name, quantization, size)


@pytest.mark.parametrize("text", [
    "qwen3:14b (fast)", "qwen3:14b (Q4_K_M, Q8_0)", "qwen3:14b (1 GB, 2 GB)", "", "(9.3 GB)",
    "qwen3:14b (Q4_K_M) (9.3 GB)", "qwen3 14b", 42, None,
])
def test_model_labels_that_are_not_a_name_and_annotation_are_refused(text: Any) -> None:
    with pytest.raises(hardnumbers.ImportRejected, match="target"):
        hardnumbers.parse_model_label(text, "target")


def _edited(edit: Callable[[dict[str, Any]], object]) -> bytes:
    data = json.loads(FIXTURE.read_bytes())
    edit(data)
    return json.dumps(data).encode()


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(target="qwen3:32b (Q4_K_M, 20 GB)"), "target 'qwen3:32b'"),
    (lambda d: d.update(target="qwen3:14b (huge)"), "neither a quantization nor a size"),
    (lambda d: d.update(drafts=["qwen2.5:0.5b (397 MB)"]), "drafts"),
    (lambda d: d.update(drafts=["qwen2.5:0.5b", "llama3.2:1b"]), "drafts"),
    (lambda d: d.update(drafts="qwen2.5:0.5b"), "drafts must be a list"),
])
def test_a_header_that_does_not_match_the_protocol_is_refused(
        edit: Callable[[dict[str, Any]], object], message: str) -> None:
    with pytest.raises(hardnumbers.ImportRejected, match=message):
        build(_edited(edit))


def test_drafts_in_another_order_and_without_annotations_are_accepted() -> None:
    swapped = _edited(lambda d: d.update(drafts=["qwen2.5:1.5b", "qwen2.5:0.5b (397 MB)"]))
    models = [(m.name, m.size_bytes) for m in build(swapped).submission.models]
    assert models == [("qwen3:14b", 9_300_000_000), ("qwen2.5:0.5b", 397_000_000),
                      ("qwen2.5:1.5b", None)]
