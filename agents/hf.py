"""``hf`` agent: sample actions from a local transformers causal LM (CPU or CUDA).

::

    agent = build_agent("hf:out/tiny-tool_use")                       # a model folder (or hub id)
    agent = HFAgent(model=policy, tokenizer=tok, temperature=1.0)     # live objects, not copied
    groups = agent.sample(pivots, n=8, seed=0)

Batching: pivots are taken ``batch_size`` at a time; each batch is ONE
``generate`` call over the left-padded prompts, each prompt repeated ``n`` times
(``batch_size * n`` rows). ``one_by_one=True`` makes one ``generate`` call per
sample instead (for benchmarks).

Seeding: sample ``j`` at pivot ``p`` depends only on ``(seed, p.id, j)``, in
either mode and whatever the batch around it: each row draws its tokens from a
stream of its own (:mod:`pivot_envs.agents.row_sampling`), not from the global
torch RNG, which sampling never touches. (Batches of other widths pad a prompt
differently; the logits then differ in the last float bits, which can change a
draw only where the uniform number falls within that distance of a boundary.)

Log-probs (``Completion.logprobs``, one per token of ``Completion.token_ids``, the
end-of-sequence token included when the model stopped) come from:

* ``logprobs="sampling"`` (default): recorded as each token is drawn: the
  log-probs of the sampled tokens under the distribution they were *drawn from*
  — after temperature and top-p (the tempered, truncated distribution).
* ``logprobs="forward"``: one forward pass over prompt + completion after
  generation: ``log_softmax(logits / temperature)`` at the sampled tokens (tempered,
  top-p NOT applied; equal to "sampling" when ``top_p == 1``). Light on memory.
* ``logprobs="none"``: not computed (``None``).

With ``temperature == 0`` sampling is greedy: one sequence per prompt, repeated
``n`` times, with log-probs at temperature 1.

A live model passed in is switched to ``eval()`` for sampling and back to its
previous mode afterwards; its weights are used as they are (no copy).
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from pivot_envs.actions import parse_action
from pivot_envs.agents.base import Agent, Completion
from pivot_envs.agents.prompt_format import resolve_prompt_format
from pivot_envs.agents.prompting import PromptConfig, encode_prompt
from pivot_envs.agents.row_sampling import RowSampler, row_key
from pivot_envs.types import Pivot

LOGPROB_MODES = ("sampling", "forward", "none")


@dataclass
class HFSampling:
    """Sampling settings of the ``hf`` agent.

    Attributes:
        temperature: softmax temperature; 0 means greedy.
        top_p: nucleus sampling mass (1.0 = off).
        max_new_tokens: longest completion in tokens.
        batch_size: prompts per ``generate`` call (each expands to ``n`` rows).
        one_by_one: one ``generate`` call per sample instead of per batch (for comparisons).
        logprobs: ``"sampling"``, ``"forward"`` or ``"none"`` (see the module docstring).
        max_prompt_tokens: keep the last this-many prompt tokens; ``None``: the model folder's recorded
            window (:mod:`~pivot_envs.agents.prompt_format`), else the smaller of the model's
            ``max_position_embeddings`` and the tokenizer's ``model_max_length``, minus ``max_new_tokens``.
        tools: where tool specs go in the prompt (:class:`~pivot_envs.agents.prompting.PromptConfig`);
            ``None``: the model folder's recorded format, else ``auto``.
        seed: the seed used when :meth:`HFAgent.sample` gets ``seed=None``.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    batch_size: int = 8
    one_by_one: bool = False
    logprobs: str = "sampling"
    max_prompt_tokens: int | None = None
    tools: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1 or self.batch_size < 1:
            raise ValueError("max_new_tokens and batch_size must be >= 1")
        if self.logprobs not in LOGPROB_MODES:
            raise ValueError(f"logprobs must be one of {LOGPROB_MODES}, got {self.logprobs!r}")


class HFAgent(Agent):
    """Sample from a transformers causal LM.

    Args:
        model: a model folder or hub id (loaded with ``AutoModelForCausalLM``), or a loaded model.
        tokenizer: the tokenizer (required with a loaded model; default: loaded from ``model``).
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``, ``"cuda:1"``...; a loaded
            model stays where it is.
        dtype: torch dtype name for loading (``"bfloat16"``...); ``None``: ``float32`` on CPU,
            the checkpoint's dtype on CUDA.
        num_threads: torch CPU threads while sampling (``None``: unchanged).
        **sampling: fields of :class:`HFSampling`.
    """

    kind = "hf"

    def __init__(
        self,
        model: str | Path | Any,
        tokenizer: Any = None,
        *,
        device: str = "auto",
        dtype: str | None = None,
        num_threads: int | None = None,
        **sampling: Any,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.settings = HFSampling(**sampling)
        self.num_threads = num_threads
        self._dtype = dtype
        self._device = device
        if isinstance(model, (str, Path)):
            self.model_path: str | None = str(model)
            if device == "auto":
                device = "cuda" if torch.cuda.is_available() else "cpu"
            if dtype is not None:
                torch_dtype = getattr(torch, dtype)
            else:
                torch_dtype = torch.float32 if device == "cpu" else "auto"
            try:
                self.model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch_dtype).to(device)
                self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(self.model_path)
            except OSError as exc:
                raise OSError(f"hf agent: cannot load a causal LM from {self.model_path!r}: {exc}") from exc
            self.model.eval()
        else:
            if tokenizer is None:
                raise ValueError("hf agent: pass tokenizer= together with a loaded model")
            self.model_path = getattr(getattr(model, "config", None), "_name_or_path", None) or getattr(model, "name_or_path", None)
            self.model, self.tokenizer = model, tokenizer
        self.device = next(self.model.parameters()).device
        self.settings.tools, self.settings.max_prompt_tokens = resolve_prompt_format(
            self.settings.tools, self.settings.max_prompt_tokens, self.model_path)
        max_prompt = self.settings.max_prompt_tokens
        if max_prompt is None:
            found = [getattr(self.model.config, "max_position_embeddings", None), getattr(self.tokenizer, "model_max_length", None)]
            limits = [int(x) for x in found if isinstance(x, int) and 0 < x < 10**7]
            if limits:
                max_prompt = max(16, min(limits) - self.settings.max_new_tokens)
        self.prompt_config = PromptConfig(tools=self.settings.tools, max_prompt_tokens=max_prompt)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        self.eos_ids = _eos_ids(self.model, self.tokenizer)

    # --- the Agent API -------------------------------------------------------------------------
    def sample(self, pivots: Sequence[Pivot], n: int, *, seed: int | None = None) -> list[list[Completion]]:
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n (samples per pivot) must be an integer >= 1, got {n!r}")
        seed = self.settings.seed if seed is None else int(seed)
        prompts = [encode_prompt(self.tokenizer, p, self.prompt_config) for p in pivots]
        out: list[list[Completion]] = []
        with self._sampling_mode():
            if self.settings.one_by_one:
                for p, ids in zip(pivots, prompts):
                    out.append([self._generate([ids], 1, [[row_key("hf", seed, p.id, j)]])[0][0] for j in range(n)])
            else:
                size = self.settings.batch_size
                for start in range(0, len(prompts), size):
                    keys = [[row_key("hf", seed, p.id, j) for j in range(n)] for p in pivots[start : start + size]]
                    out.extend(self._generate(prompts[start : start + size], n, keys))
        return out

    def config(self) -> dict[str, Any]:
        """A dict that rebuilds this agent from its model folder (a live model is referred to by its path)."""
        if self.model_path is None:
            raise ValueError("hf agent built from a live model without a name_or_path cannot be rebuilt from a config")
        out: dict[str, Any] = {"kind": self.kind, "model": self.model_path, **asdict(self.settings)}
        if self._dtype is not None:
            out["dtype"] = self._dtype
        if self._device != "auto":
            out["device"] = self._device
        if self.num_threads is not None:
            out["num_threads"] = self.num_threads
        return out

    def close(self) -> None:
        self.model = None

    # --- internals -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _sampling_mode(self) -> Iterator[None]:
        import torch

        was_training = self.model.training
        previous_threads = torch.get_num_threads()
        if self.num_threads:
            torch.set_num_threads(self.num_threads)
        self.model.eval()
        try:
            with torch.no_grad():
                yield
        finally:
            if was_training:
                self.model.train()
            torch.set_num_threads(previous_threads)

    def _generate(self, prompts: list[list[int]], n: int, keys: list[list[int]]) -> list[list[Completion]]:
        """One ``generate`` call: ``len(prompts) * n`` rows (``keys[i][j]``: the stream of sample ``j`` of
        prompt ``i``); returns ``n`` completions per prompt."""
        import torch

        s = self.settings
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        greedy = s.temperature == 0
        rows = 1 if greedy else n
        ids, mask = ids.repeat_interleave(rows, 0).to(self.device), mask.repeat_interleave(rows, 0).to(self.device)
        # greedy search over scores in which the row's own draw is the only finite token (or over the
        # model's scores, when greedy): the sampler owns the randomness
        sampler = None if greedy else RowSampler([k for group in keys for k in group[:rows]], width,
                                                 s.temperature, s.top_p)
        out = self.model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=s.max_new_tokens, pad_token_id=self.pad_id,
            eos_token_id=self.eos_ids, return_dict_in_generate=True, do_sample=False, temperature=None, top_p=None,
            top_k=None, logits_processor=[sampler] if sampler is not None else None,
            output_scores=greedy and s.logprobs == "sampling")
        new = out.sequences[:, width:]
        lengths = [_completion_length(row, self.eos_ids, self.pad_id) for row in new.tolist()]
        if sampler is not None and s.logprobs == "sampling":
            logprobs: list[list[float]] | None = [lp[:n_tokens] for lp, n_tokens in zip(sampler.logprobs, lengths)]
        else:
            logprobs = self._logprobs(out, new, ids, mask, lengths)
        groups: list[list[Completion]] = []
        for i in range(len(prompts)):
            group = []
            for j in range(rows):
                r = i * rows + j
                tokens = new[r, : lengths[r]].tolist()
                text = self.tokenizer.decode(tokens, skip_special_tokens=True)
                group.append(Completion(text=text, action=parse_action(text), token_ids=tokens,
                                        logprobs=None if logprobs is None else logprobs[r]))
            groups.append(group if not greedy else [_copy(group[0]) for _ in range(n)])
        return groups

    def _logprobs(self, out: Any, new: Any, prompt_ids: Any, prompt_mask: Any, lengths: list[int]) -> list[list[float]] | None:
        import torch

        s = self.settings
        if s.logprobs == "none":
            return None
        if s.logprobs == "sampling":
            scores = self.model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
            return [scores[r, : lengths[r]].float().tolist() for r in range(len(lengths))]
        full = torch.cat([prompt_ids, new], dim=1)
        mask = torch.cat([prompt_mask, (torch.arange(new.shape[1], device=new.device)[None, :]
                                        < torch.tensor(lengths, device=new.device)[:, None]).long()], dim=1)
        logits = self.model(input_ids=full, attention_mask=mask).logits[:, prompt_ids.shape[1] - 1 : -1].float()
        temperature = s.temperature if s.temperature > 0 else 1.0
        logp = torch.log_softmax(logits / temperature, dim=-1).gather(-1, new[:, :, None]).squeeze(-1)
        return [logp[r, : lengths[r]].tolist() for r in range(len(lengths))]


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids: list[int] = []
    cfg = getattr(model, "generation_config", None)
    eos = getattr(cfg, "eos_token_id", None)
    for value in (eos if isinstance(eos, list) else [eos]) + [tokenizer.eos_token_id]:
        if value is not None and value not in ids:
            ids.append(int(value))
    if not ids:
        raise ValueError("hf agent: neither the model's generation_config nor the tokenizer names an eos token")
    return ids


def _completion_length(row: list[int], eos_ids: list[int], pad_id: int) -> int:
    """Tokens up to and including the first eos; without eos, up to the trailing padding."""
    for i, tok in enumerate(row):
        if tok in eos_ids:
            return i + 1
    end = len(row)
    while end > 0 and row[end - 1] == pad_id and pad_id not in eos_ids:
        end -= 1
    return end


def _copy(c: Completion) -> Completion:
    import copy

    return copy.deepcopy(c)
