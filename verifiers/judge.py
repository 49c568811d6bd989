"""``judge``: an LLM decides functional equivalence, through any OpenAI-compatible endpoint.

Works with OpenAI, vLLM (``vllm serve``), ``transformers serve``, or anything
that speaks ``POST /v1/chat/completions``::

    judge = build_verifier({"name": "judge", "model": "Qwen/Qwen3-8B",
                            "base_url": "http://127.0.0.1:8000/v1"})
    judge.verify_many(actions, pivot)        # concurrent, up to max_concurrency in flight

The prompt (see :mod:`pivot_envs.verifiers.helpers.judge_prompt`) quotes every piece
of data, so a candidate cannot rewrite the instructions; the verdict is parsed
strictly. Requests use temperature 0, a timeout, and the ``openai`` client's own
retries (``max_retries``; exponential back-off, or the server's ``Retry-After``) on
connection errors, timeouts, HTTP 408/409/429 and 5xx.
Verdicts are cached on disk by (model, prompt). Every failure (server down,
timeout, HTTP error after retries, malformed verdict) is returned as
``VerifyResult(error=...)``, never as a silent 0 or 1.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Coroutine, Sequence, TypeVar

from pivot_envs.actions import parse_action
from pivot_envs.types import Action, Message, Pivot, VerifyResult
from pivot_envs.verifiers.base import Verifier, broadcast, register_verifier
from pivot_envs.verifiers.helpers.judge_cache import VerdictCache, cache_key, default_cache_dir
from pivot_envs.verifiers.helpers.judge_prompt import MalformedVerdict, Verdict, build_messages, parse_verdict

log = logging.getLogger(__name__)

T = TypeVar("T")

SECRET_FIELDS = ("api_key",)
"""Fields never written by :meth:`JudgeVerifier.config` (they would leak into logs and run configs)."""


class JudgeRequestError(Exception):
    """A request to the judge endpoint failed for good (after the allowed retries)."""


@dataclass
class _Session:
    """An OpenAI client and the concurrency limit, bound to one event loop."""

    client: Any
    semaphore: asyncio.Semaphore


@register_verifier("judge", accepted_by="judge")
@dataclass
class JudgeVerifier(Verifier):
    """Ask an LLM whether the candidate action is functionally equivalent to the expert action.

    Attributes:
        model: model name sent to the endpoint (for ``transformers serve``/vLLM, the served name or path).
        base_url: OpenAI-compatible base URL, e.g. ``http://127.0.0.1:8000/v1``; ``None`` uses
            ``$OPENAI_BASE_URL`` or OpenAI's API.
        api_key: API key; ``None`` reads the variable named by ``api_key_env``, else ``"EMPTY"``
            (local servers ignore it). Never written by :meth:`config`.
        api_key_env: environment variable holding the API key.
        timeout_s: seconds allowed for one HTTP request (connect + generation).
        max_retries: extra attempts after a retryable failure (connection error, timeout,
            HTTP 408/409/429/5xx), made by the ``openai`` client (its ``max_retries``); other
            HTTP errors fail at once.
        backoff_s: accepted but no longer used: the client's back-off applies (0.5 s, doubled
            per retry up to 8 s, less up to 25 % jitter; a ``Retry-After`` answer sets it).
        max_concurrency: most requests in flight at once, per event loop (``verify_many`` and
            concurrent ``averify``/``averify_many`` calls share the limit).
        cache: read and write the on-disk verdict cache, keyed by (model, prompt messages); the
            endpoint is not part of the key, so one model name served at two URLs shares verdicts.
        cache_dir: cache folder; ``None`` means ``$XDG_CACHE_HOME/pivot-envs/judge``
            (``~/.cache/pivot-envs/judge``). Safe to share between processes.
        max_tokens: most tokens the judge may generate.
        context_messages: how many of the last context messages the judge sees (0: none).
        max_message_chars: longer context message contents are cut in the middle (actions never are).
        extra_instructions: text appended to the judge's system prompt (domain rules).
        malformed_retries: extra attempts after a malformed verdict (useful only when the
            endpoint is not deterministic at temperature 0).
    """

    model: str = "gpt-4o-mini"
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 60.0
    max_retries: int = 3
    backoff_s: float = 0.5
    max_concurrency: int = 32
    cache: bool = True
    cache_dir: str | None = None
    max_tokens: int = 256
    context_messages: int = 6
    max_message_chars: int = 2000
    extra_instructions: str = ""
    malformed_retries: int = 0
    _sessions: Any = field(default=None, init=False, repr=False, compare=False)
    """Per event loop ``id(loop) -> (loop, _Session)``: not config, never pickled."""

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError(f"judge.max_concurrency must be >= 1, got {self.max_concurrency}")
        if self.max_retries < 0 or self.malformed_retries < 0:
            raise ValueError("judge.max_retries and judge.malformed_retries must be >= 0")
        if self.timeout_s <= 0:
            raise ValueError(f"judge.timeout_s must be > 0, got {self.timeout_s}")
        self._sessions = {}

    # -- config and pickling ------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """The rebuildable config, without secrets (``api_key``)."""
        cfg = super().config()
        for name in SECRET_FIELDS:
            cfg.pop(name, None)
        return cfg

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_sessions"] = None  # clients hold sockets bound to an event loop
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._sessions = {}

    # -- public API ----------------------------------------------------------------------------

    def verify(self, action: Action, pivot: Pivot) -> VerifyResult:
        return self.verify_many([action], [pivot])[0]

    def verify_many(self, actions: Sequence[Action], pivots: Sequence[Pivot] | Pivot) -> list[VerifyResult]:
        """Verify a batch concurrently (up to ``max_concurrency`` requests in flight), in order."""
        pivot_list = broadcast(pivots, len(actions))
        return _run_sync(self._owned_batch(list(actions), pivot_list))

    async def averify(self, action: Action, pivot: Pivot) -> VerifyResult:
        return await self._judge(self._session(), action, pivot)

    async def averify_many(self, actions: Sequence[Action], pivots: Sequence[Pivot] | Pivot) -> list[VerifyResult]:
        """Verify a batch concurrently in the running loop; the semaphore bounds requests in flight."""
        pivot_list = broadcast(pivots, len(actions))
        session = self._session()
        return list(await asyncio.gather(*(self._judge(session, a, p) for a, p in zip(actions, pivot_list))))

    async def aclose(self) -> None:
        """Close the HTTP client bound to the running event loop, if any."""
        entry = self._sessions.pop(id(asyncio.get_running_loop()), None)
        if entry is not None:
            await entry[1].client.close()

    def prompt(self, action: Action | str | Message, pivot: Pivot) -> list[Message]:
        """The chat messages the judge receives for ``action`` at ``pivot``."""
        return build_messages(
            parse_action(action),
            pivot,
            context_messages=self.context_messages,
            max_message_chars=self.max_message_chars,
            extra_instructions=self.extra_instructions,
        )

    def verdict_cache(self) -> VerdictCache | None:
        """The on-disk cache, or ``None`` when caching is off."""
        if not self.cache:
            return None
        return VerdictCache(self.cache_dir if self.cache_dir else default_cache_dir())

    # -- internals -----------------------------------------------------------------------------

    def _new_session(self) -> _Session:
        from openai import AsyncOpenAI

        api_key = self.api_key or os.environ.get(self.api_key_env) or "EMPTY"
        client = AsyncOpenAI(api_key=api_key, base_url=self.base_url, timeout=self.timeout_s,
                             max_retries=self.max_retries)
        return _Session(client=client, semaphore=asyncio.Semaphore(self.max_concurrency))

    def _session(self) -> _Session:
        """The session of the running loop (made on first use); sessions of closed loops are dropped."""
        loop = asyncio.get_running_loop()
        for key, (other, _) in list(self._sessions.items()):
            if other.is_closed():
                del self._sessions[key]
        entry = self._sessions.get(id(loop))
        if entry is None or entry[0] is not loop:
            entry = self._sessions[id(loop)] = (loop, self._new_session())
        return entry[1]

    async def _owned_batch(self, actions: list[Action], pivots: list[Pivot]) -> list[VerifyResult]:
        session = self._new_session()
        try:
            return list(await asyncio.gather(*(self._judge(session, a, p) for a, p in zip(actions, pivots))))
        finally:
            await session.client.close()

    async def _judge(self, session: _Session, action: Action | str | Message, pivot: Pivot) -> VerifyResult:
        """One verdict; never raises."""
        try:
            messages = self.prompt(action, pivot)
            cache = self.verdict_cache()
            key = cache_key(self.model, messages)
            if cache is not None:
                hit = cache.get(key)
                if hit is not None:
                    return self._result(hit)
            verdict = await self._ask(session, messages)
            if cache is not None:
                try:
                    cache.put(key, verdict, self.model)
                except OSError as exc:
                    log.warning("judge cache %s is not writable (%s); verdicts are not cached", cache.directory, exc)
            return self._result(verdict)
        except (JudgeRequestError, MalformedVerdict) as exc:
            return VerifyResult.failure(self.name, str(exc))
        except Exception as exc:  # noqa: BLE001 - a verifier bug must not kill a batch
            return VerifyResult.failure(self.name, f"{type(exc).__name__}: {exc}")

    def _result(self, verdict: Verdict) -> VerifyResult:
        ok = verdict.equivalent
        return VerifyResult(reward=float(ok), passed=ok, verifier=self.name, reason=verdict.reason)

    async def _ask(self, session: _Session, messages: list[Message]) -> Verdict:
        """Request a verdict, re-asking up to ``malformed_retries`` times on a malformed one."""
        for attempt in range(self.malformed_retries + 1):
            text = await self._complete(session, messages)
            try:
                return parse_verdict(text)
            except MalformedVerdict as exc:
                if attempt == self.malformed_retries:
                    raise MalformedVerdict(f"malformed verdict: {exc}") from None
        raise AssertionError("unreachable")

    async def _complete(self, session: _Session, messages: list[Message]) -> str | None:
        """One chat completion (the client retries transport failures); raises JudgeRequestError."""
        import openai

        try:
            async with session.semaphore:
                response = await session.client.chat.completions.create(
                    model=self.model, messages=messages, temperature=0, max_tokens=self.max_tokens
                )
        except (openai.APITimeoutError, openai.APIConnectionError, openai.APIStatusError) as exc:
            raise JudgeRequestError(self._failure(exc)) from None
        if not response.choices:
            return None
        return response.choices[0].message.content

    def _failure(self, exc: Any) -> str:
        """What went wrong, where, and after how many attempts (the client's retries included)."""
        import openai

        where = f"model {self.model!r} at {self.base_url or 'the default OpenAI endpoint'}"
        hint = ""
        if isinstance(exc, openai.APITimeoutError):
            problem = f"timed out after {self.timeout_s:g}s"
        elif isinstance(exc, openai.APIConnectionError):
            problem = f"connection failed ({exc.__cause__ or exc})"
        else:
            problem = f"HTTP {exc.status_code}: {_error_detail(exc)}"
            hint = _HINTS.get(exc.status_code, "")
        attempts = _attempts(exc)
        after = f" after {attempts} attempt(s)" if attempts else ""
        return f"judge request to {where} failed{after}: {problem}{hint}"


_HINTS = {
    401: "; check api_key or the variable named by api_key_env",
    403: "; check api_key or the variable named by api_key_env",
    404: "; check base_url (it usually ends with /v1) and that the server serves this model",
    422: "; the server rejected the request fields",
}


def _attempts(exc: Any) -> int | None:
    """Requests the client made for a failed call (the retry count it sends with the last one, plus one)."""
    request = getattr(exc, "request", None)
    retries = request.headers.get("x-stainless-retry-count", "") if request is not None else ""
    return int(retries) + 1 if retries.isdigit() else None


def _error_detail(exc: Any) -> str:
    """The server's error message, without the client's ``Error code: N -`` prefix."""
    body = exc.body
    if isinstance(body, dict):
        message = body.get("message") or body.get("detail") or (body.get("error") or {}).get("message")
        if message:
            return _short(message)
    return _short(exc.message)


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from sync code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
