"""The captured llama-server fixtures are present, parse, and tell the recorded story."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.support.realengine import build
from tests.support.realengine.fixture_files import FIXTURES, path, provenance, verbatim
from tests.support.realengine.server import ACCEPTANCE_LINE, N_PREDICT, RECORDED_COUNTERS

TEXT_FILES = sorted(
    p.name for p in FIXTURES.glob("*.txt") if not p.name.startswith("completion-stream-")
)
JSON_FILES = sorted(p.name for p in FIXTURES.glob("*.json"))


def _json(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(verbatim(name))
    return data


def _events(name: str) -> list[dict[str, Any]]:
    return [json.loads(line.removeprefix("data: ")) for line in verbatim(name).splitlines()
            if line.startswith("data: ")]


def test_the_readme_lists_every_fixture() -> None:
    readme = path("README.md").read_text()
    listed = set(re.findall(r"^\| `([^`]+)` \|", readme, re.MULTILINE))
    present = {p.name for p in FIXTURES.iterdir()} - {"README.md"}
    assert listed == present
    assert {"acceptance-lines.txt", "synthetic-warning.txt", "version.txt",
            "props-no-draft.json", "completion-no-draft.json",
            "completion-draft-truncated.json"} <= present
    assert build.LLAMA_CPP_COMMIT in readme and build.SDIST_SHA256 in readme


@pytest.mark.parametrize("name", TEXT_FILES)
def test_text_fixtures_say_where_they_come_from(name: str) -> None:
    header = "\n".join(provenance(name))
    assert f"llama-cpp-python=={build.SDIST_VERSION}" in header
    assert build.LLAMA_CPP_COMMIT in header
    assert re.search(r"# captured: \d{4}-\d\d-\d\d on ", header)
    assert verbatim(name).strip()


@pytest.mark.parametrize("name", JSON_FILES)
def test_json_fixtures_parse(name: str) -> None:
    assert isinstance(_json(name), dict)


def test_the_acceptance_lines_are_the_recorded_counters() -> None:
    runs = [line.removeprefix("# line ").split(": run ") for line in
            provenance("acceptance-lines.txt") if line.startswith("# line ")]
    lines = verbatim("acceptance-lines.txt").splitlines()
    assert len(lines) == len(runs) >= 4
    role_of = {"draft-identical": "draft_identical", "draft-truncated": "draft_truncated",
               "draft-unrelated": "draft_unrelated", "draft-synthetic": "synthetic"}
    for (_, run), line in zip(runs, lines, strict=True):
        match = ACCEPTANCE_LINE.search(line)
        assert match is not None, line
        assert (int(match["generated"]), int(match["accepted"])) == RECORDED_COUNTERS[role_of[run]]
        assert line.split(" I ", 1)[1].startswith("slot print_timing: id  0 | task ")


def test_the_completions_differ_only_by_the_draft_counters() -> None:
    plain = _json("completion-no-draft.json")
    drafted = _json("completion-draft-truncated.json")
    assert "draft_n" not in plain["timings"]
    assert (drafted["timings"]["draft_n"], drafted["timings"]["draft_n_accepted"]) == (
        RECORDED_COUNTERS["draft_truncated"]
    )
    assert plain["content"] == drafted["content"] and plain["content"].isprintable()
    assert plain["timings"]["predicted_n"] == drafted["timings"]["predicted_n"] == N_PREDICT
    assert "/blobs/sha256-" in plain["model"]


@pytest.mark.parametrize("run", ["no-draft", "draft-truncated"])
def test_the_stream_ends_with_the_timings_and_adds_up_to_the_content(run: str) -> None:
    events = _events(f"completion-stream-{run}.txt")
    *tokens, last = events
    assert last["stop"] is True and not any(e["stop"] for e in tokens)
    assert "".join(e["content"] for e in events) == _json(f"completion-{run}.json")["content"]
    assert ("draft_n" in last["timings"]) == (run != "no-draft")


def test_props_and_version_name_the_build() -> None:
    props = _json("props-draft-truncated.json")
    assert props["build_info"] == f"b1-{build.LLAMA_CPP_COMMIT[:7]}"
    assert "/blobs/sha256-" in props["model_path"]
    version = verbatim("version.txt")
    assert f"version: 0.5.0-dev (build 1, commit {build.LLAMA_CPP_COMMIT[:7]})" in version


def test_the_metrics_count_the_drafted_requests() -> None:
    totals = dict(re.findall(r"^llamacpp:(spec_decode_num_\w+_tokens_total) (\d+)$",
                             verbatim("metrics-draft-truncated.txt"), re.MULTILINE))
    requests = len(re.findall(r"draft acceptance", verbatim("log-draft-truncated.txt")))
    drafted, accepted = RECORDED_COUNTERS["draft_truncated"]
    assert int(totals["spec_decode_num_draft_tokens_total"]) == requests * drafted
    assert int(totals["spec_decode_num_accepted_tokens_total"]) == requests * accepted


def test_the_warning_and_error_lines() -> None:
    synthetic = verbatim("synthetic-warning.txt")
    assert " W spec common_specu: synthetic speculative acceptance is enabled for " \
        "benchmarking; generated output is not valid" in synthetic
    incompatible = verbatim("incompatible-vocab.txt").splitlines()
    assert len(incompatible) == 2
    assert incompatible[0].endswith("E spec common_specu: the target and draft vocabs are not "
                                    "compatible")
    assert "failed to initialize speculative decoding context" in incompatible[1]
    # And the server went on serving without the draft:
    log = verbatim("log-draft-incompatible.txt")
    assert "listening on http://127.0.0.1:" in log and "draft acceptance" not in log
