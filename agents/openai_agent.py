"""``openai`` agent: sample actions from any OpenAI-compatible chat endpoint.

Works with ``vllm serve``, SGLang, ``transformers serve`` and OpenAI itself::

    agent = build_agent("openai:Qwen/Qwen3-8B@http://10.0.0.1:8000/v1,http://10.0.0.2:8000/v1")
    groups = agent.sample(pivots, n=8, seed=0)

* Requests go out concurrently (at most ``max_concurrency`` in flight, a request being
  retried keeps its slot) through the ``openai`` async client; the base URLs are used
  round-robin, request by request.
* The pivot's context is sent as OpenAI messages with its ``tools``. A reply with
  ``tool_calls`` is mapped to an Action with :func:`~pivot_envs.actions.parse_action`
  of the message; a plain-text reply (servers without a tool parser) is parsed as
  text, so Hermes ``<tool_call>`` blocks still become tool calls.
* ``n`` samples per pivot go in ONE request (``n=``) where the server supports it.
  A server that answers with fewer choices than asked (``transformers serve``
  ignores ``n``) or rejects ``n`` is remembered, and the missing samples are
  requested one by one.
* Log-probs of the sampled tokens are requested (``logprobs=true``); a server that
  rejects the field is remembered and asked without it; replies without them give
  ``None``. Token ids are taken from the reply when the server adds them (vLLM with
  ``extra_body={"return_token_ids": true}``).
* Connection errors, timeouts, 408/409/429 and 5xx answers are retried by the
  ``openai`` client itself (``max_retries`` per URL, its exponential back-off or the
  server's ``Retry-After``); when a URL still fails the request fails over to the next
  URL, each URL once. Other 4xx answers fail at once. When every URL failed the error
  names the URLs tried and what each answered.
* Seeds: each request carries ``seed`` derived from ``(seed, pivot id[, sample
  index])``; whether the server honours it is up to the server.

``transformers serve`` drops the ``content`` of assistant messages that carry
``tool_calls``; with ``tool_calls_as_text=True`` earlier actions are sent as their
Hermes text instead, which chat templates that render tool calls as Hermes text
(the tiny reference models of :mod:`pivot_envs.models.reference`) turn into the
very prompt the ``hf`` agent builds locally.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from pivot_envs.actions import message_text, parse_action
from pivot_envs.agents.base import Agent, Completion
from pivot_envs.agents.prompting import chat_messages
from pivot_envs.endpoint import EndpointSettings
from pivot_envs.types import Message, Pivot, stable_hash


class OpenAIAgentError(RuntimeError):
    """A request that failed on every attempt (or a 4xx answer)."""


@dataclass
class OpenAISettings(EndpointSettings):
    """Settings of the ``openai`` agent (the endpoint's: :class:`~pivot_envs.endpoint.EndpointSettings`).

    Attributes:
        temperature: sampling temperature.
        top_p: nucleus sampling mass.
        max_new_tokens: longest completion, sent as ``max_tokens_field``.
        max_tokens_field: ``"max_tokens"`` or ``"max_completion_tokens"`` (OpenAI reasoning models).
        max_concurrency: requests in flight at once (over all URLs).
        max_retries: extra attempts on one URL after a retryable failure (the ``openai`` client's
            retries); then the next URL is tried, so a request makes at most
            ``(max_retries + 1) * len(base_urls)`` attempts. ``0``: fail over at once.
        backoff_s: accepted but no longer used: the client's back-off applies (0.5 s, doubled
            per retry up to 8 s, less up to 25 % jitter; a ``Retry-After`` answer sets it).
        max_backoff_s: accepted but no longer used (the client's longest back-off is 8 s).
        use_n: ``True``/``False`` force ``n=`` per request on/off; ``None`` detects it.
        logprobs: request log-probs of the sampled tokens (dropped if the server rejects it).
        send_tools: send the pivot's tools with the request.
        tool_calls_as_text: send earlier assistant tool calls as Hermes text content
            instead of structured ``tool_calls``.
        seed: the seed used when ``sample`` gets ``seed=None``.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    max_tokens_field: str = "max_tokens"
    max_concurrency: int = 16
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    use_n: bool | None = None
    logprobs: bool = True
    send_tools: bool = True
    tool_calls_as_text: bool = False

    def __post_init__(self) -> None:
        if self.max_concurrency < 1 or self.max_retries < 0 or self.timeout_s <= 0:
            raise ValueError("max_concurrency must be >= 1, max_retries >= 0 and timeout_s > 0")
        if self.max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise ValueError(f"max_tokens_field must be 'max_tokens' or 'max_completion_tokens', got {self.max_tokens_field!r}")


class OpenAIAgent(Agent):
    """Sample from an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        model: the model name the server expects.
        base_urls: one URL, a comma-separated string or a list (``.../v1``); ``None``: the
            client's default (``OPENAI_BASE_URL`` or api.openai.com).
        base_url: a single URL (alias of ``base_urls``).
        **settings: fields of :class:`OpenAISettings`.
    """

    kind = "openai"

    def __init__(self, model: str, base_urls: str | Sequence[str] | None = None, *, base_url: str | None = None, **settings: Any):
        if not model:
            raise ValueError("openai agent: model must be a non-empty model name")
        self.model = model
        urls = base_urls if base_urls is not None else base_url
        if isinstance(urls, str):
            urls = [u.strip() for u in urls.split(",") if u.strip()]
        self.base_urls: list[str | None] = list(urls) if urls else [None]
        self.settings = OpenAISettings(**settings)
        self._n_ok: bool | None = self.settings.use_n
        self._logprobs_ok = self.settings.logprobs
        self._turn = itertools.count()
        self.requests = 0  # HTTP requests sent (every attempt, the client's retries included), for reports and tests

    @property
    def n_supported(self) -> bool | None:
        """Whether the server answers ``n`` choices per request (``None``: not known yet)."""
        return self._n_ok

    # --- Agent API ---------------------------------------------------------------------------
    def sample(self, pivots: Sequence[Pivot], n: int, *, seed: int | None = None) -> list[list[Completion]]:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.asample(pivots, n, seed=seed))
        with ThreadPoolExecutor(1) as pool:  # called from inside an event loop: run in a fresh one
            return pool.submit(asyncio.run, self.asample(pivots, n, seed=seed)).result()

    async def asample(self, pivots: Sequence[Pivot], n: int, *, seed: int | None = None) -> list[list[Completion]]:
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient

        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n (samples per pivot) must be an integer >= 1, got {n!r}")
        seed = self.settings.seed if seed is None else int(seed)
        key = os.environ.get(self.settings.api_key_env) or "EMPTY"

        async def count(_request: Any) -> None:
            self.requests += 1

        clients = {url: AsyncOpenAI(base_url=url, api_key=key, timeout=self.settings.timeout_s,
                                    max_retries=self.settings.max_retries,
                                    http_client=DefaultAsyncHttpxClient(event_hooks={"request": [count]}))
                   for url in self.base_urls}
        sem = asyncio.Semaphore(self.settings.max_concurrency)
        try:
            return list(await asyncio.gather(*(self._pivot(clients, sem, p, n, seed) for p in pivots)))
        finally:
            await asyncio.gather(*(c.close() for c in clients.values()), return_exceptions=True)

    def config(self) -> dict[str, Any]:
        urls = [u for u in self.base_urls if u is not None]
        out: dict[str, Any] = {"kind": self.kind, "model": self.model, **asdict(self.settings)}
        if urls:
            out["base_urls"] = urls
        return out

    # --- one pivot ---------------------------------------------------------------------------
    async def _pivot(self, clients: dict, sem: asyncio.Semaphore, pivot: Pivot, n: int, seed: int) -> list[Completion]:
        body = self.request_body(pivot)
        got: list[Completion] = []
        if n > 1 and self._n_ok is not False:
            try:
                choices = await self._create(clients, sem, {**body, "n": n, "seed": _seed(seed, pivot.id)})
            except _Rejected:
                self._n_ok = False
            else:
                got = [parse_choice(c) for c in choices[:n]]
                if len(choices) < n:
                    self._n_ok = False  # once seen, for good
                elif self._n_ok is None:
                    self._n_ok = True
        singles = range(len(got), n)
        if singles:
            results = await asyncio.gather(*(self._create(clients, sem, {**body, "seed": _seed(seed, pivot.id, j)}) for j in singles))
            got += [parse_choice(choices[0]) for choices in results]
        return got

    def request_body(self, pivot: Pivot) -> dict[str, Any]:
        """The chat-completions request for one pivot (messages, tools, sampling settings); the rollout
        service builds its requests with it too."""
        s = self.settings
        messages: list[Message] = chat_messages(pivot.context, tool_calls_as_text=s.tool_calls_as_text)
        for m in messages:  # back to the wire format: arguments as JSON strings, no 'name' on tool results
            if m["role"] == "tool":
                m.pop("name", None)
            for call in m.get("tool_calls") or []:
                fn = call.get("function", call)
                if not isinstance(fn.get("arguments"), str):
                    fn["arguments"] = json.dumps(fn["arguments"], ensure_ascii=False)
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": s.temperature,
                                "top_p": s.top_p, s.max_tokens_field: s.max_new_tokens}
        if s.send_tools and pivot.tools:
            body["tools"] = pivot.tools
        return body

    async def _create(self, clients: dict, sem: asyncio.Semaphore, body: dict[str, Any]) -> list[Any]:
        """The choices of one request, asking for logprobs while the server accepts them."""
        if not self._logprobs_ok:
            return await self._send(clients, sem, body)
        try:
            return await self._send(clients, sem, {**body, "logprobs": True})
        except _Rejected:
            choices = await self._send(clients, sem, body)  # rejected again: not the logprobs' fault
            self._logprobs_ok = False
            return choices

    async def _send(self, clients: dict, sem: asyncio.Semaphore, request: dict[str, Any]) -> list[Any]:
        """One request on the round-robin URL, failing over to the next URLs when the client's retries ran out."""
        import openai

        first = next(self._turn)
        extra = dict(self.settings.extra_body) or None
        failures: list[str] = []
        attempts: list[int | None] = []
        for i in range(len(self.base_urls)):
            url = self.base_urls[(first + i) % len(self.base_urls)]
            where = url or "the default endpoint"
            try:
                async with sem:
                    resp = await clients[url].chat.completions.create(**request, extra_body=extra)
            except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
                raise _Rejected(f"openai agent: {where} rejected the request for model {self.model!r}: {exc}") from exc
            except (openai.APIConnectionError, openai.APIStatusError) as exc:  # timeouts are connection errors
                status = getattr(exc, "status_code", None)
                if status is not None and not (status in (408, 409, 429) or status >= 500):
                    raise OpenAIAgentError(f"openai agent: {where} answered HTTP {status} for model {self.model!r}: {exc}") from exc
                attempts.append(_attempts(exc))
                failures.append(f"{where}: {type(exc).__name__}: {exc}")
            else:
                if not resp.choices:
                    raise OpenAIAgentError(f"openai agent: {where} answered with no choices for model {self.model!r}")
                return list(resp.choices)
        tried = ", ".join(sorted({str(u or "the default endpoint") for u in self.base_urls}))
        after = f" after {sum(attempts)} attempts" if None not in attempts else ""  # type: ignore[arg-type]
        raise OpenAIAgentError(
            f"openai agent: no answer from {tried} for model {self.model!r}{after} "
            f"(is the server running, and does the base URL end in /v1?): " + " | ".join(failures)
        )


class _Rejected(OpenAIAgentError):
    """A 400/422 answer: the caller may retry without ``logprobs`` or ``n``."""


def _attempts(exc: Any) -> int | None:
    """Requests the client made for a failed call (the retry count it sends with the last one, plus one)."""
    request = getattr(exc, "request", None)
    retries = request.headers.get("x-stainless-retry-count", "") if request is not None else ""
    return int(retries) + 1 if retries.isdigit() else None


def _seed(*parts: Any) -> int:
    return int(stable_hash("openai", *parts), 16) % (2**31)


def parse_choice(choice: Any) -> Completion:
    """One chat-completions choice as a :class:`Completion` (text, parsed action, token ids and log-probs when given)."""
    msg = choice.message
    calls = [tc.model_dump(exclude_none=True) for tc in (msg.tool_calls or [])]
    if calls:
        message: Message = {"role": "assistant", "content": msg.content, "tool_calls": calls}
        action = parse_action(message)
        text = message_text(message)
    else:
        text = msg.content or ""
        action = parse_action(text)  # Hermes <tool_call> blocks in plain text still become calls
    logprobs = None
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if content:
        logprobs = [float(t.logprob) for t in content]
    extra = getattr(choice, "model_extra", None) or {}
    token_ids = extra.get("token_ids")
    return Completion(text=text, action=action, token_ids=list(token_ids) if token_ids else None, logprobs=logprobs)
