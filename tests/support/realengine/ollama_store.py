"""Lay GGUF files out as an Ollama models folder (what ``$OLLAMA_MODELS`` points at).

Layout (Ollama's ``manifest/paths.go``; /work/shared/reference/ollama-api.md, "Read first" 9)::

    manifests/registry.ollama.ai/<namespace>/<model>/<tag>   JSON manifest
    blobs/sha256-<hex>                                       content-addressed bytes

A manifest is a Docker v2 image manifest: ``config`` points at a small JSON blob describing
the model, ``layers[]`` at the GGUF (mediaType ``application/vnd.ollama.image.model``) and,
for a model with a Modelfile ``DRAFT``, at the draft GGUF (``application/vnd.ollama.image.draft``).
Identical files share one blob, as in a real store.

DEFAULT_NAMES maps the roles of tiny_gguf.ModelSet to the model names the protocols use, so
code that looks a protocol's models up in ``$OLLAMA_MODELS`` finds real GGUF files:

    role                 name            why this name
    target               qwen3:14b       the protocols' target
    draft_truncated      qwen3:0.6b      a draft that agrees often (target's first layer)
    draft_identical      qwen3:1.7b      a draft that always agrees (a copy of the target)
    draft_unrelated      qwen2.5:0.5b    hardnumbers-m2's draft: same vocab, never agrees
    draft_incompatible   qwen2.5:1.5b    hardnumbers-m2's other draft: a vocab llama.cpp rejects
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .tiny_gguf import ModelSet

REGISTRY = "registry.ollama.ai"
MANIFEST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_MEDIA_TYPE = "application/vnd.docker.container.image.v1+json"
MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
DRAFT_MEDIA_TYPE = "application/vnd.ollama.image.draft"

DEFAULT_NAMES: dict[str, str] = {
    "target": "qwen3:14b",
    "draft_truncated": "qwen3:0.6b",
    "draft_identical": "qwen3:1.7b",
    "draft_unrelated": "qwen2.5:0.5b",
    "draft_incompatible": "qwen2.5:1.5b",
}


@dataclass(frozen=True)
class StoredModel:
    name: str  # as given, e.g. "qwen3:14b"
    manifest: Path
    blob: Path  # the model layer's blob
    digest: str  # "sha256:<hex>" of the model layer
    size: int
    draft_blob: Path | None = None


def split_name(name: str) -> tuple[str, str, str]:
    """(namespace, model, tag) of an Ollama model name; the tag defaults to "latest"."""
    path, _, tag = name.partition(":")
    namespace, _, model = path.rpartition("/")
    if not model or "/" in namespace:
        raise ValueError(f"unsupported model name {name!r}")
    return namespace or "library", model, tag or "latest"


def manifest_path(models_dir: Path, name: str) -> Path:
    namespace, model, tag = split_name(name)
    return models_dir / "manifests" / REGISTRY / namespace / model / tag


def blob_path(models_dir: Path, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or len(hexdigest) != 64:
        raise ValueError(f"unsupported digest {digest!r}")
    # Ollama writes "sha256-<hex>" on disk: ':' is not allowed in Windows file names.
    return models_dir / "blobs" / f"sha256-{hexdigest}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _put_blob(models_dir: Path, source: Path, link: bool) -> tuple[str, int]:
    digest = _sha256(source)
    target = blob_path(models_dir, digest)
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + "-partial")
        if link:
            try:
                # A hard link saves copying a large (bench) model; it shares the inode, so
                # only use it where nothing will corrupt a blob on purpose.
                os.link(source, partial)
            except OSError:
                shutil.copyfile(source, partial)
        else:
            shutil.copyfile(source, partial)
        os.replace(partial, target)
    return digest, target.stat().st_size


def _put_bytes(models_dir: Path, data: bytes) -> tuple[str, int]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    target = blob_path(models_dir, digest)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return digest, len(data)


def add_model(
    models_dir: Path, name: str, gguf: Path, draft: Path | None = None, link: bool = False
) -> StoredModel:
    """Store `gguf` under `name` (and `draft` as its DRAFT layer); return where it went."""
    digest, size = _put_blob(models_dir, gguf, link)
    layers = [{"mediaType": MODEL_MEDIA_TYPE, "digest": digest, "size": size}]
    draft_blob = None
    if draft is not None:
        draft_digest, draft_size = _put_blob(models_dir, draft, link)
        layers.append({"mediaType": DRAFT_MEDIA_TYPE, "digest": draft_digest, "size": draft_size})
        draft_blob = blob_path(models_dir, draft_digest)
    _, model, _ = split_name(name)
    family = model.split(".")[0]
    # The config blob is what `ollama show` summarises; Ollama's own has these keys.
    config = {
        "model_format": "gguf",
        "model_family": family,
        "model_families": [family],
        "model_type": "tiny",
        "file_type": "F32",
        "architecture": "amd64",
        "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]},
    }
    config_digest, config_size = _put_bytes(models_dir, json.dumps(config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": config_digest, "size": config_size},
        "layers": layers,
    }
    path = manifest_path(models_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return StoredModel(name, path, blob_path(models_dir, digest), digest, size, draft_blob)


def resolve(models_dir: Path, name: str, media_type: str = MODEL_MEDIA_TYPE) -> Path:
    """The blob of `name`'s layer of `media_type`, read back from its manifest as Ollama would."""
    manifest = json.loads(manifest_path(models_dir, name).read_text())
    for layer in manifest["layers"]:
        if layer["mediaType"] == media_type:
            return blob_path(models_dir, layer["digest"])
    raise LookupError(f"{name} has no {media_type} layer")


def store_model_set(
    models_dir: Path,
    models: ModelSet,
    names: Mapping[str, str] = DEFAULT_NAMES,
    link: bool = False,
) -> dict[str, StoredModel]:
    """Store every role of `models` under its name in `names`; return them by role.

    Roles missing from `names` are left out, so a caller can store a subset.
    """
    paths = models.by_role()
    unknown = set(names) - set(paths)
    if unknown:
        raise ValueError(f"unknown roles {sorted(unknown)}; roles are {sorted(paths)}")
    return {
        role: add_model(models_dir, name, paths[role], link=link) for role, name in names.items()
    }
