"""Who answers a harness's ``chat/completions`` calls: the policy behind the harness endpoint.

::

    policy = EnginePolicy(build_agent("hf:out/tiny"))                     # in-process: hf or vllm agent
    policy = EnginePolicy(trainer_agent, version=lambda: engine.policy_version)   # the trainer's own sampler
    policy = UpstreamPolicy("Qwen/Qwen3-8B", "http://10.0.0.1:8000/v1")   # an OpenAI-compatible server
    policy = build_policy("hf:out/tiny")          # from an agent spec (openai:MODEL@URL forwards)
    answer = policy.complete(PolicyRequest(messages, tools, pivot_id="r1@0"))
    answer.text, answer.prompt_token_ids, answer.token_ids, answer.logprobs, answer.policy_version

:class:`EnginePolicy` renders the harness's messages and tools into prompt token ids exactly as the agent
does when it samples (:func:`pivot_envs.agents.prompting.encode_prompt`, the agent's own
``PromptConfig``: the same template and the same cut), and samples with the agent (the trainer's live
``hf`` sampler, or its ``vllm`` engine, whose weights the trainer syncs after every update). Requests
that arrive together are sampled together: one worker thread takes every request waiting and makes ONE
``agent.sample`` call for all of them (so 32 harnesses in flight cost batched ``generate`` calls, and the
torch model is only ever driven from one thread). A request's ``stop`` sequences cut each answer after
sampling (:mod:`pivot_envs.harness.stops`: text, tokens and log-probs alike).

:class:`UpstreamPolicy` forwards the request as the harness sent it (model name replaced) and asks for
log-probs and token ids (``return_token_ids``: vLLM's extension); a server that returns no token ids
gives calls without them (recorded, not trainable).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import openai

from pivot_envs.agents.prompting import encode_prompt
from pivot_envs.agents.spec import build_agent, parse_agent_spec
from pivot_envs.harness.stops import cut_at_stop
from pivot_envs.types import Message, Pivot

__all__ = ["EnginePolicy", "HarnessPolicy", "PolicyAnswer", "PolicyRequest", "UpstreamPolicy", "build_policy"]


@dataclass
class PolicyRequest:
    """One call to answer: the harness's conversation and tools, and where it stands in its task.

    ``pivot_id`` names the call (``<rollout id>@<call index>``: an agent seeds by it); ``expert`` is the
    task's recorded action at this turn (only the ``replay`` / ``noisy_expert`` baselines read it: a
    policy never sees it); ``domain`` and ``meta`` complete the :class:`~pivot_envs.types.Pivot`; ``stop``: the
    request's stop sequences; ``body``: the request's other fields (a forwarding policy sends them on).
    """

    messages: list[Message]
    tools: list[dict[str, Any]]
    pivot_id: str
    expert: Message = field(default_factory=lambda: {"role": "assistant", "content": ""})
    domain: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)
    stop: list[str] = field(default_factory=list)

    def pivot(self) -> Pivot:
        return Pivot(id=self.pivot_id, domain=self.domain, context=list(self.messages), expert=self.expert,
                     tools=list(self.tools), meta=dict(self.meta))


@dataclass
class PolicyAnswer:
    """What the policy answered: text, tokens, the sampler's log-probs, the version, how long sampling took
    (``sample_s``: the whole batch the call was in) and how long the call waited for its batch (``queued_s``).

    ``message``: an assistant message the backend already parsed (an upstream server's ``tool_calls``);
    ``None``: the endpoint parses ``text``. ``prompt_cut``: the prompt reached the agent's window
    (``max_prompt_tokens``), so its middle was dropped.
    """

    text: str
    prompt_token_ids: list[int] | None
    token_ids: list[int] | None
    logprobs: list[float] | None
    policy_version: int
    sample_s: float
    stopped: bool = True
    message: Message | None = None
    queued_s: float = 0.0
    prompt_cut: bool = False


class HarnessPolicy:
    """Base class of the endpoint's policies (:meth:`complete` blocks; it is called from worker threads)."""

    name = "base"

    def complete(self, request: PolicyRequest) -> PolicyAnswer:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:
        """Stop worker threads and clients (idempotent)."""


class EnginePolicy(HarnessPolicy):
    """An in-process agent (``hf``, ``vllm``, or a baseline) answering every rollout's calls, batched.

    Args:
        agent: an :class:`~pivot_envs.agents.base.Agent`; agents with a ``tokenizer`` and a ``prompt_config``
            (``hf``, ``vllm``) give prompt token ids, completion tokens and log-probs; the baselines (``replay``,
            ``noisy_expert``) give text only.
        version: the policy version of the weights the agent samples with now (the trainer's
            ``rollout.policy_version``; default 0).
        max_batch: the most requests one ``agent.sample`` call takes.
        seed: the base of the sampling seeds (each batch gets its own).
    """

    def __init__(self, agent: Any, *, version: Callable[[], int] | None = None, max_batch: int = 64, seed: int = 0):
        if max_batch < 1:
            raise ValueError(f"EnginePolicy.max_batch must be >= 1, got {max_batch}")
        self.agent = agent
        self.name = str(getattr(agent, "kind", "agent"))
        self.version = version or (lambda: 0)
        self.max_batch = int(max_batch)
        self.seed = int(seed)
        self.batches = 0
        self._queue: queue.Queue[tuple[PolicyRequest, Future, float] | None] = queue.Queue()
        self._worker = threading.Thread(target=self._serve, name="harness-policy", daemon=True)
        self._closed = False
        self._worker.start()

    def complete(self, request: PolicyRequest) -> PolicyAnswer:
        if self._closed:
            raise RuntimeError("the harness policy is closed")
        future: Future = Future()
        self._queue.put((request, future, time.perf_counter()))
        return future.result()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._worker.join(timeout=30)

    # ------------------------------------------------------------------ the worker
    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            while len(batch) < self.max_batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(more)
            self._answer(batch)

    def _answer(self, batch: list[tuple[PolicyRequest, Future, float]]) -> None:
        picked = time.perf_counter()
        try:
            pivots = [request.pivot() for request, _, _ in batch]
            prompts = [self._prompt_ids(p) for p in pivots]
            version = int(self.version())
            self.batches += 1
            start = time.perf_counter()
            groups = self.agent.sample(pivots, 1, seed=(self.seed * 1_000_003 + self.batches) % (2**31))
            sample_s = time.perf_counter() - start
        except BaseException as exc:  # noqa: BLE001 - every waiting harness gets the error, the worker lives on
            for _, future, _ in batch:
                future.set_exception(exc)
            return
        for (request, future, enqueued), prompt, group in zip(batch, prompts, groups):
            completion = group[0]
            answer = PolicyAnswer(text=completion.text, prompt_token_ids=prompt, prompt_cut=self._cut(prompt),
                                  token_ids=None if completion.token_ids is None else list(completion.token_ids),
                                  logprobs=None if completion.logprobs is None else list(completion.logprobs),
                                  policy_version=version, sample_s=sample_s,
                                  stopped=self._stopped(completion.token_ids), queued_s=picked - enqueued)
            future.set_result(cut_at_stop(answer, request.stop, self._decode()))

    def _prompt_ids(self, pivot: Pivot) -> list[int] | None:
        tokenizer = getattr(self.agent, "tokenizer", None)
        config = getattr(self.agent, "prompt_config", None)
        if tokenizer is None or config is None:
            return None
        return encode_prompt(tokenizer, pivot, config)

    def _cut(self, prompt: list[int] | None) -> bool:
        limit = getattr(getattr(self.agent, "prompt_config", None), "max_prompt_tokens", None)
        return prompt is not None and limit is not None and len(prompt) >= limit

    def _decode(self) -> Callable[[list[int]], str] | None:
        tokenizer = getattr(self.agent, "tokenizer", None)
        if tokenizer is None:
            return None
        return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)

    def _stopped(self, token_ids: Sequence[int] | None) -> bool:
        eos = getattr(self.agent, "eos_ids", None)
        if token_ids is None or not token_ids or not eos:
            return True
        return int(token_ids[-1]) in eos


class UpstreamPolicy(HarnessPolicy):
    """An OpenAI-compatible server answering the calls (vLLM, SGLang, ``transformers serve``).

    Args:
        model: the model name the server expects (replaces the harness's ``model``).
        base_url: the server's ``/v1`` URL.
        timeout_s: one request's timeout.
        api_key_env: the environment variable holding the key (``"EMPTY"`` when unset).
    """

    name = "openai"

    def __init__(self, model: str, base_url: str, *, timeout_s: float = 120.0, api_key_env: str = "OPENAI_API_KEY"):
        self.model = model
        self.base_url = base_url
        self.client = openai.OpenAI(base_url=base_url, api_key=os.environ.get(api_key_env) or "EMPTY",
                                    timeout=timeout_s, max_retries=2)

    def complete(self, request: PolicyRequest) -> PolicyAnswer:
        body = {k: v for k, v in request.body.items() if k not in ("model", "messages", "tools", "stream")}
        if not request.tools:  # tool_choice "none": sent without tools (servers refuse a tool_choice without tools)
            body.pop("tool_choice", None)
        extra = dict(body.pop("extra_body", None) or {})
        extra.setdefault("return_token_ids", True)
        kwargs: dict[str, Any] = dict(model=self.model, messages=request.messages, logprobs=True, extra_body=extra,
                                      **body)
        if request.tools:
            kwargs["tools"] = request.tools
        start = time.perf_counter()
        response = self.client.chat.completions.create(**kwargs)
        sample_s = time.perf_counter() - start
        choice = response.choices[0]
        raw = choice.model_dump()
        message = raw.get("message") or {}
        content = message.get("content") or ""
        tool_calls = [c for c in message.get("tool_calls") or [] if c.get("type", "function") == "function"]
        parsed: Message | None = None
        if tool_calls:
            parsed = {"role": "assistant", "content": content or None,
                      "tool_calls": [{"id": c.get("id"), "type": "function",
                                      "function": {"name": c["function"]["name"],
                                                   "arguments": c["function"].get("arguments") or "{}"}}
                                     for c in tool_calls]}
        logprobs = None
        if raw.get("logprobs") and raw["logprobs"].get("content"):
            logprobs = [float(t["logprob"]) for t in raw["logprobs"]["content"]]
        token_ids = raw.get("token_ids")
        prompt_ids = (response.model_extra or {}).get("prompt_token_ids")
        return PolicyAnswer(text=content, prompt_token_ids=list(prompt_ids) if prompt_ids else None,
                            token_ids=list(token_ids) if token_ids else None, logprobs=logprobs, policy_version=0,
                            sample_s=sample_s, stopped=choice.finish_reason != "length", message=parsed)

    def close(self) -> None:
        self.client.close()


def build_policy(spec: str | dict[str, Any]) -> HarnessPolicy:
    """The endpoint's policy from an agent spec: ``openai:MODEL@URL`` forwards to that server (its first URL);
    any other agent (``hf:DIR``, ``vllm:MODEL``, ``replay``...) answers in-process."""
    config = parse_agent_spec(spec) if isinstance(spec, str) else dict(spec)
    if config.get("kind") == "openai":
        urls = config.get("base_urls") or []
        if not urls:
            raise ValueError(f"--policy {spec!r}: name the server: openai:MODEL@http://HOST:PORT/v1")
        return UpstreamPolicy(config["model"], urls[0])
    return EnginePolicy(build_agent(config))
