"""Rollouts as a service (the ProRL Agent design): sample groups of actions at pivots from a pool of
OpenAI-compatible backends and score them with the domains' verifiers, over HTTP.

::

    POST   /backends      {"url": "http://host:8000/v1"}          add an LLM backend (vLLM, SGLang, transformers serve)
    DELETE /backends      {"url": ...}                            remove it (requests in flight on it finish)
    GET    /backends                                              {"backends": [{"url", "in_flight", "requests", "failures", ...}]}
    POST   /rollouts      {"pivots": [...] | "pivot_ids": [...], "domain": D, "split": "train", "n": G,
                           "model": NAME, "sampling": {"temperature", "top_p", "max_tokens", ...}, "verifier": SPEC}
                          -> {"id": ...}   (429 when the service is full)
    GET    /rollouts/{id} -> {"id", "status": "queued|running|done|cancelled|failed", "error",
                              "results": [[{"text", "reward", "passed", "error", "token_ids", "logprobs", ...} | null, ...] per pivot],
                              "done", "total", ...}
    DELETE /rollouts/{id} cancel: the job stops, its backend calls are abandoned

Jobs flow through three stages joined by bounded ``asyncio.Queue`` s, each with its own workers:

* **init** (``init_workers``): resolve the job's pivots and render one chat request per sample, the way
  the ``openai`` agent does (:mod:`pivot_envs.agents.openai_agent`);
* **run** (``run_workers`` requests in flight): send each request to the least-loaded backend
  (``AsyncOpenAI`` per backend); a connection error, timeout, 408/409/429 or 5xx answer puts that
  backend on a short cool-down and the request is retried on another one (up to ``max_attempts``;
  with no backend at all it waits up to ``backend_wait_s`` for one to be added);
* **eval** (``eval_workers``): batches of finished samples are scored with
  :func:`~pivot_envs.verifiers.batch.verify_batch` in a thread pool, so a slow verifier never holds
  up sampling (the queue into eval is large: ``eval_queue``).

Every job is a JSON file in ``state_dir`` (rewritten as results arrive); a service started on a
folder whose jobs did not finish marks them ``failed`` with the reason, visible through GET.
:class:`RolloutService` works without FastAPI (``await service.submit(...)``, ``service.get(id)``).
"""



import asyncio
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pivot_envs.agents.openai_agent import OpenAIAgent, parse_choice
from pivot_envs.domains import get_domain
from pivot_envs.serve.owner import MISROUTED_STATUS, misrouted, new_id
from pivot_envs.sources import resolve_pivots
from pivot_envs.types import Pivot, VerifyResult, stable_hash
from pivot_envs.verifiers.batch import VerifierResolver, verify_batch

STATUSES = ("queued", "running", "done", "cancelled", "failed")
FINISHED = ("done", "cancelled", "failed")


class RequestError(ValueError):
    """A malformed request: ``field`` names the offending field (answered 422)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class QueueFull(RuntimeError):
    """The service has as many unfinished jobs as it accepts (answered 429)."""


class NoBackend(RuntimeError):
    """No backend answered a request."""


# --- the backend pool -------------------------------------------------------------------------------


@dataclass
class Backend:
    url: str
    client: Any
    in_flight: int = 0
    requests: int = 0
    failures: int = 0
    down_until: float = 0.0
    logprobs_ok: bool = True
    last_error: str | None = None
    added_at: float = field(default_factory=time.time)

    def info(self) -> dict[str, Any]:
        return {"url": self.url, "in_flight": self.in_flight, "load": self.in_flight, "requests": self.requests,
                "failures": self.failures, "healthy": time.monotonic() >= self.down_until, "last_error": self.last_error}


class BackendPool:
    """OpenAI-compatible backends, assigned least-loaded; changed at run time."""

    def __init__(self, *, timeout_s: float = 120.0, cooldown_s: float = 2.0, api_key: str | None = None):
        self.timeout_s = timeout_s
        self.cooldown_s = cooldown_s
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self._backends: dict[str, Backend] = {}
        self._changed: asyncio.Event | None = None

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def add(self, url: str) -> tuple[Backend, bool]:
        from openai import AsyncOpenAI

        url = url.rstrip("/")
        if url in self._backends:
            return self._backends[url], False
        backend = Backend(url, AsyncOpenAI(base_url=url, api_key=self.api_key, timeout=self.timeout_s, max_retries=0))
        self._backends[url] = backend
        self._event().set()
        return backend, True

    def remove(self, url: str) -> Backend | None:
        backend = self._backends.pop(url.rstrip("/"), None)
        if backend is not None:
            asyncio.get_running_loop().create_task(self._close_when_idle(backend))
        return backend

    async def _close_when_idle(self, backend: Backend) -> None:
        while backend.in_flight:
            await asyncio.sleep(0.1)
        await backend.client.close()

    def list(self) -> list[dict[str, Any]]:
        return [b.info() for b in self._backends.values()]

    def __len__(self) -> int:
        return len(self._backends)

    async def pick(self, avoid: set[str], wait_s: float) -> Backend:
        """The least-loaded backend, preferring healthy ones not in ``avoid``; waits for one to exist."""
        deadline = time.monotonic() + wait_s
        while True:
            now = time.monotonic()
            pool = list(self._backends.values())
            if pool:
                fresh = [b for b in pool if b.url not in avoid] or pool
                healthy = [b for b in fresh if now >= b.down_until]
                if healthy:
                    return min(healthy, key=lambda b: (b.in_flight, b.requests))
                soonest = min(b.down_until for b in fresh)
                await asyncio.sleep(max(0.01, min(soonest - now, deadline - now)))
            else:
                if now >= deadline:
                    raise NoBackend("no backend in the pool (POST /backends {\"url\": \".../v1\"})")
                event = self._event()
                event.clear()
                try:
                    await asyncio.wait_for(event.wait(), deadline - now)
                except asyncio.TimeoutError:
                    pass
            if time.monotonic() >= deadline and not self._backends:
                raise NoBackend("no backend in the pool (POST /backends {\"url\": \".../v1\"})")

    async def close(self) -> None:
        await asyncio.gather(*(b.client.close() for b in self._backends.values()), return_exceptions=True)


# --- jobs ---------------------------------------------------------------------------------------------


@dataclass
class Job:
    id: str
    request: dict[str, Any]
    status: str = "queued"
    error: str | None = None
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    results: list[list[dict[str, Any] | None]] = field(default_factory=list)
    pivot_ids: list[str] = field(default_factory=list)
    done: int = 0
    total: int = 0
    attempts: int = 0  # backend requests sent, retries included
    retries: int = 0
    pivots: list[Pivot] = field(default_factory=list, repr=False)
    tasks: set = field(default_factory=set, repr=False)
    finished: asyncio.Event | None = field(default=None, repr=False)

    def view(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "error": self.error, "results": self.results,
                "pivot_ids": self.pivot_ids, "done": self.done, "total": self.total, "attempts": self.attempts,
                "retries": self.retries, "created": self.created, "updated": self.updated,
                "domain": self.request.get("domain"), "n": self.request.get("n"), "model": self.request.get("model")}

    def record(self) -> dict[str, Any]:
        return {**self.view(), "request": self.request}


@dataclass
class _Sample:
    job: Job
    pivot_index: int
    sample_index: int
    body: dict[str, Any]
    completion: Any = None
    error: str | None = None
    completion_backend: str | None = None


def validate_request(body: Any) -> dict[str, Any]:
    """The normalised ``POST /rollouts`` body, or :class:`RequestError` naming the bad field."""
    if not isinstance(body, dict):
        raise RequestError("body", "must be a JSON object")
    pivots, ids = body.get("pivots"), body.get("pivot_ids")
    if (pivots is None) == (ids is None):
        raise RequestError("pivots", "give exactly one of 'pivots' (pivot dicts) or 'pivot_ids' (ids of the domain's bundled pivots)")
    domain = body.get("domain")
    if domain is not None and (not isinstance(domain, str) or not domain):
        raise RequestError("domain", "must be a domain name")
    if domain:
        try:
            get_domain(domain)
        except ValueError as exc:
            raise RequestError("domain", str(exc)) from None
    split = body.get("split", "train")
    if not isinstance(split, str) or not split:
        raise RequestError("split", "must be a split name such as 'train' or 'test'")
    out: dict[str, Any] = {"domain": domain, "split": split}
    if ids is not None:
        if not domain:
            raise RequestError("domain", "is required with 'pivot_ids' (they name the domain's bundled pivots)")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            raise RequestError("pivot_ids", "must be a non-empty list of pivot id strings")
        out["pivot_ids"] = ids
    else:
        if not isinstance(pivots, list) or not pivots:
            raise RequestError("pivots", "must be a non-empty list of pivot objects")
        for k, p in enumerate(pivots):
            if not isinstance(p, dict):
                raise RequestError(f"pivots[{k}]", "must be a pivot object")
            try:
                pivot = Pivot.from_dict({"domain": domain, **p} if domain and not p.get("domain") else p)
            except Exception as exc:  # noqa: BLE001 - any decoding problem is the client's
                raise RequestError(f"pivots[{k}]", f"not a valid pivot: {type(exc).__name__}: {exc}") from None
            if not pivot.domain and body.get("verifier") is None:
                raise RequestError(f"pivots[{k}].domain", "is missing: give the pivot's or the request's 'domain', or a 'verifier'")
        out["pivots"] = pivots
    n = body.get("n", 1)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise RequestError("n", f"must be an integer >= 1, got {n!r}")
    out["n"] = n
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("model", "must be the model name the backends serve")
    out["model"] = model
    sampling = body.get("sampling", {})
    if not isinstance(sampling, dict):
        raise RequestError("sampling", "must be an object such as {\"temperature\": 1.0, \"max_tokens\": 256}")
    for key in ("temperature", "top_p"):
        if key in sampling and (not isinstance(sampling[key], (int, float)) or isinstance(sampling[key], bool) or sampling[key] < 0):
            raise RequestError(f"sampling.{key}", f"must be a number >= 0, got {sampling[key]!r}")
    for key in ("max_tokens", "max_new_tokens", "seed"):
        if key in sampling and (not isinstance(sampling[key], int) or isinstance(sampling[key], bool) or sampling[key] < (1 if key != "seed" else 0)):
            raise RequestError(f"sampling.{key}", f"must be a positive integer, got {sampling[key]!r}")
    out["sampling"] = sampling
    if body.get("verifier") is not None:
        if not isinstance(body["verifier"], (str, dict)):
            raise RequestError("verifier", "must be a verifier name or config object")
        out["verifier"] = body["verifier"]
    for key in ("tag", "metadata"):
        if key in body:
            out[key] = body[key]
    return out


# --- the service ----------------------------------------------------------------------------------------


class RolloutService:
    """The three-stage rollout pipeline over a backend pool (see the module docstring).

    Args:
        state_dir: folder of the job records (one ``JOB_ID.json`` each); ``None``: nothing persisted.
        backends: URLs (``.../v1``) to start with.
        max_jobs: unfinished jobs accepted at once; more are refused (:class:`QueueFull`, HTTP 429).
        init_workers, run_workers, eval_workers: workers of each stage (``run_workers`` = requests in flight).
        run_queue, eval_queue: bounds of the queues between the stages.
        eval_batch: most samples scored by one ``verify_batch`` call.
        max_attempts: attempts of one request over the backends before its sample is an error.
        backend_wait_s: how long a request waits for a backend when the pool is empty.
        timeout_s: timeout of one backend request.
        cooldown_s: how long a failing backend is avoided.
    """

    def __init__(self, state_dir: str | Path | None = None, *, backends: list[str] = (), max_jobs: int = 64,
                 init_workers: int = 2, run_workers: int = 64, eval_workers: int = 2, run_queue: int = 256,
                 eval_queue: int = 100_000, eval_batch: int = 64, max_attempts: int = 6, backend_wait_s: float = 60.0,
                 timeout_s: float = 120.0, cooldown_s: float = 2.0):
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.max_jobs = max_jobs
        self.workers = {"init": init_workers, "run": run_workers, "eval": eval_workers}
        self.queue_sizes = {"init": max_jobs, "run": run_queue, "eval": eval_queue}
        self.eval_batch = eval_batch
        self.max_attempts = max_attempts
        self.backend_wait_s = backend_wait_s
        self.pool = BackendPool(timeout_s=timeout_s, cooldown_s=cooldown_s)
        self._initial_backends = list(backends)
        self.jobs: dict[str, Job] = {}
        self._tasks: list[asyncio.Task] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor = ThreadPoolExecutor(max(1, eval_workers), thread_name_prefix="rollout-eval")
        self._bundled: dict[tuple[str, str], dict[str, Pivot]] = {}
        self._lock = threading.Lock()
        self._resolvers: dict[str, Any] = {}
        if self.state_dir is not None:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self._recover()

    # --- life cycle ---
    def _recover(self) -> None:
        """Load the job records; the unfinished ones (a previous service stopped) become ``failed``."""
        assert self.state_dir is not None
        for path in sorted(self.state_dir.glob("*.json")):
            try:
                rec = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            job = Job(id=rec["id"], request=rec.get("request", {}), status=rec.get("status", "failed"), error=rec.get("error"),
                      created=rec.get("created", 0.0), updated=rec.get("updated", 0.0), results=rec.get("results", []),
                      pivot_ids=rec.get("pivot_ids", []), done=rec.get("done", 0), total=rec.get("total", 0),
                      attempts=rec.get("attempts", 0), retries=rec.get("retries", 0))
            if job.status not in FINISHED:
                job.error = (f"the rollout service restarted before this job finished (it was {job.status}, "
                             f"{job.done} of {job.total} samples scored); submit it again")
                job.status = "failed"
                job.updated = time.time()
                self._persist(job)
            self.jobs[job.id] = job

    def start(self) -> None:
        """Start the workers on the running event loop (called by every async entry point)."""
        loop = asyncio.get_running_loop()
        if self._loop is loop and self._tasks:
            return
        self._loop = loop
        self._queues = {name: asyncio.Queue(size) for name, size in self.queue_sizes.items()}
        for url in self._initial_backends:
            self.pool.add(url)
        self._initial_backends = []
        for stage, worker in (("init", self._init_worker), ("run", self._run_worker), ("eval", self._eval_worker)):
            self._tasks += [loop.create_task(worker(), name=f"rollout-{stage}-{k}") for k in range(self.workers[stage])]

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.pool.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # --- public API ---
    def add_backend(self, url: str) -> dict[str, Any]:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise RequestError("url", f"must be an http(s) URL of an OpenAI-compatible API ending in /v1, got {url!r}")
        backend, added = self.pool.add(url)
        return {**backend.info(), "added": added}

    def remove_backend(self, url: str) -> dict[str, Any] | None:
        if not isinstance(url, str) or not url:
            raise RequestError("url", "must be the URL of a backend in the pool")
        backend = self.pool.remove(url)
        return None if backend is None else backend.info()

    def backends(self) -> list[dict[str, Any]]:
        return self.pool.list()

    async def submit(self, body: Any) -> str:
        """Validate and queue a job; its id. Raises :class:`RequestError` or :class:`QueueFull`."""
        self.start()
        request = validate_request(body)
        if "pivot_ids" in request:
            index = await asyncio.get_running_loop().run_in_executor(None, self._bundled_index, request["domain"], request["split"])
            missing = [i for i in request["pivot_ids"] if i not in index]
            if missing:
                raise RequestError("pivot_ids", f"{len(missing)} not in the bundled {request['split']!r} split of "
                                                f"{request['domain']!r}: {missing[:5]}")
        unfinished = sum(1 for j in self.jobs.values() if j.status not in FINISHED)
        if unfinished >= self.max_jobs:
            raise QueueFull(f"{unfinished} unfinished jobs (the most this service accepts is {self.max_jobs}); retry later")
        job = Job(id=new_id(16), request=request, finished=asyncio.Event())
        job.pivot_ids = list(request.get("pivot_ids") or [str(p.get("id", k)) for k, p in enumerate(request["pivots"])])
        job.total = len(job.pivot_ids) * request["n"]
        job.results = [[None] * request["n"] for _ in job.pivot_ids]
        try:
            self._queues["init"].put_nowait(job)
        except asyncio.QueueFull:
            raise QueueFull("the init queue is full; retry later") from None
        self.jobs[job.id] = job
        self._persist(job)
        return job.id

    def get(self, job_id: str) -> dict[str, Any] | None:
        job = self.jobs.get(job_id)
        return None if job is None else job.view()

    def cancel(self, job_id: str) -> dict[str, Any] | None:
        job = self.jobs.get(job_id)
        if job is None:
            return None
        if job.status not in FINISHED:
            self._finish(job, "cancelled", "cancelled by the client")
            for task in list(job.tasks):
                task.cancel()  # abandons the backend calls (their connections are closed)
        return job.view()

    async def wait(self, job_id: str, timeout: float | None = None) -> dict[str, Any]:
        job = self.jobs[job_id]
        if job.status not in FINISHED and job.finished is not None:
            await asyncio.wait_for(job.finished.wait(), timeout)
        return job.view()

    def stats(self) -> dict[str, Any]:
        queues = getattr(self, "_queues", {})
        return {"queues": {k: {"size": q.qsize(), "max": q.maxsize} for k, q in queues.items()},
                "jobs": {s: sum(1 for j in self.jobs.values() if j.status == s) for s in STATUSES},
                "backends": len(self.pool), "max_jobs": self.max_jobs}

    # --- internals ---
    def _bundled_index(self, domain: str, split: str) -> dict[str, Pivot]:
        with self._lock:
            if (domain, split) not in self._bundled:
                self._bundled[(domain, split)] = {p.id: p for p in resolve_pivots(None, domain=domain, split=split)}
            return self._bundled[(domain, split)]

    def _persist(self, job: Job) -> None:
        if self.state_dir is None:
            return
        job.updated = time.time()
        path = self.state_dir / f"{job.id}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(job.record(), ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)

    def _finish(self, job: Job, status: str, error: str | None = None) -> None:
        if job.status in FINISHED:
            return
        job.status = status
        job.error = error
        job.pivots = []
        self._persist(job)
        if job.finished is not None:
            job.finished.set()

    def _verifier_of(self, spec: Any):
        key = json.dumps(spec, sort_keys=True, default=str)
        with self._lock:
            if key not in self._resolvers:
                self._resolvers[key] = VerifierResolver(spec)
            return self._resolvers[key]

    async def _init_worker(self) -> None:
        while True:
            job: Job = await self._queues["init"].get()
            if job.status in FINISHED:
                continue
            try:
                req = job.request
                if "pivot_ids" in req:
                    index = await asyncio.get_running_loop().run_in_executor(None, self._bundled_index, req["domain"], req["split"])
                    pivots = [index[i] for i in req["pivot_ids"]]
                else:
                    pivots = [Pivot.from_dict({"domain": req["domain"], **p} if req["domain"] and not p.get("domain") else p)
                              for p in req["pivots"]]
                s = dict(req["sampling"])
                settings = {"temperature": s.pop("temperature", 1.0), "top_p": s.pop("top_p", 1.0),
                            "max_new_tokens": s.pop("max_tokens", s.pop("max_new_tokens", 256)),
                            "tool_calls_as_text": s.pop("tool_calls_as_text", False), "send_tools": s.pop("send_tools", True)}
                s.pop("logprobs", None)
                base_seed = s.pop("seed", None)
                agent = OpenAIAgent(req["model"], "http://unused/v1", **settings)  # renders prompts as the agent does
                job.pivots = pivots
                job.status = "running"
                self._persist(job)
                for pi, pivot in enumerate(pivots):
                    body = {**agent.request_body(pivot), **s}
                    for j in range(req["n"]):
                        if job.status in FINISHED:
                            break
                        sample_body = dict(body)
                        if base_seed is not None:
                            sample_body["seed"] = _seed(base_seed, pivot.id, j)
                        await self._queues["run"].put(_Sample(job, pi, j, sample_body))
            except Exception as exc:  # noqa: BLE001 - a job that cannot start fails with its reason
                self._finish(job, "failed", f"init: {type(exc).__name__}: {exc}")

    async def _run_worker(self) -> None:
        while True:
            sample: _Sample = await self._queues["run"].get()
            job = sample.job
            if job.status in FINISHED:
                continue
            task = asyncio.get_running_loop().create_task(self._sample(sample))
            job.tasks.add(task)
            try:
                await task
            except asyncio.CancelledError:
                if asyncio.current_task().cancelling():  # the worker itself is stopping
                    raise
                continue  # the job was cancelled: its call is abandoned
            finally:
                job.tasks.discard(task)
            if job.status not in FINISHED:
                await self._queues["eval"].put(sample)

    async def _sample(self, sample: _Sample) -> None:
        """One request, retried on other backends when one fails."""
        import openai

        job, avoid, failures = sample.job, set(), []
        for attempt in range(self.max_attempts):
            try:
                backend = await self.pool.pick(avoid, self.backend_wait_s)
            except NoBackend as exc:
                failures.append(str(exc))
                break
            body = dict(sample.body)
            if backend.logprobs_ok:
                body["logprobs"] = True
            backend.in_flight += 1
            backend.requests += 1
            job.attempts += 1
            try:
                resp = await backend.client.chat.completions.create(**body)
            except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
                if body.get("logprobs") and backend.logprobs_ok:
                    backend.logprobs_ok = False  # ask this backend again without logprobs
                    continue
                sample.error = f"{backend.url} rejected the request: {exc}"
                return
            except (openai.APIConnectionError, openai.APIStatusError) as exc:
                status = getattr(exc, "status_code", None)
                if status is not None and not (status in (408, 409, 429) or status >= 500):
                    sample.error = f"{backend.url} answered HTTP {status}: {exc}"
                    return
                backend.failures += 1
                backend.last_error = f"{type(exc).__name__}: {exc}"
                backend.down_until = time.monotonic() + self.pool.cooldown_s
                avoid.add(backend.url)
                failures.append(f"{backend.url}: {type(exc).__name__}: {exc}")
                job.retries += 1
                continue
            finally:
                backend.in_flight -= 1
            if not resp.choices:
                sample.error = f"{backend.url} answered with no choices"
                return
            sample.completion = parse_choice(resp.choices[0])
            sample.completion_backend = backend.url
            return
        sample.error = f"no backend answered after {len(failures)} attempts: " + " | ".join(failures[-3:])

    async def _eval_worker(self) -> None:
        queue = self._queues["eval"]
        loop = asyncio.get_running_loop()
        while True:
            batch = [await queue.get()]
            while len(batch) < self.eval_batch and not queue.empty():
                batch.append(queue.get_nowait())
            batch = [s for s in batch if s.job.status not in FINISHED]
            scored = [s for s in batch if s.completion is not None]
            results: list[Any] = []
            if scored:
                try:
                    resolvers = [self._verifier_of(s.job.request.get("verifier")) for s in scored]
                    actions = [s.completion.action for s in scored]
                    pivots = [s.job.pivots[s.pivot_index] for s in scored]
                    chosen = [r.for_pivot(p) for r, p in zip(resolvers, pivots)]
                    results = await loop.run_in_executor(self._executor, verify_batch, actions, pivots, chosen)
                except Exception as exc:  # noqa: BLE001
                    results = [VerifyResult.failure("rollouts", f"{type(exc).__name__}: {exc}")] * len(scored)
            by_sample = dict(zip(map(id, scored), results))
            touched: dict[str, Job] = {}
            for s in batch:
                job = s.job
                if job.status in FINISHED:
                    continue
                if s.completion is None:
                    entry = {"text": None, "reward": None, "passed": False, "error": f"sampling: {s.error}", "reason": "",
                             "token_ids": None, "logprobs": None, "backend": None}
                else:
                    r = by_sample[id(s)]
                    c = s.completion
                    entry = {"text": c.text, "reward": r.reward, "passed": r.passed, "error": r.error, "reason": r.reason,
                             "verifier": r.verifier, "token_ids": c.token_ids, "logprobs": c.logprobs,
                             "action": c.action.to_dict(), "backend": s.completion_backend}
                if job.results[s.pivot_index][s.sample_index] is None:
                    job.done += 1
                job.results[s.pivot_index][s.sample_index] = entry
                touched[job.id] = job
            for job in touched.values():
                if job.done >= job.total:
                    sampled = [e for g in job.results for e in g if e and e["text"] is not None]
                    if sampled:
                        self._finish(job, "done")
                    else:
                        self._finish(job, "failed", "no sample could be drawn: " + str(job.results[0][0]["error"]))
                else:
                    self._persist(job)


def _seed(*parts: Any) -> int:
    return int(stable_hash("rollouts", *parts), 16) % (2**31)


# --- HTTP ---------------------------------------------------------------------------------------------


def build_router(state: Any = None):
    """The rollout endpoints as a ``fastapi.APIRouter``.

    ``state``: a :class:`RolloutService`, a dict of its keyword arguments (``state_dir``, ``backends``,
    ``max_jobs``, ...), an object with a ``rollouts`` attribute holding either, or ``None`` (an
    in-memory service; ``PIVOT_ROLLOUTS_STATE`` names a state folder). The service is at
    ``router.service``.
    """
    from fastapi import APIRouter, Request
    from fastapi.responses import JSONResponse

    service = _service_of(state)
    router = APIRouter(tags=["rollouts"])
    router.service = service  # type: ignore[attr-defined]

    def error(status: int, field: str | None, message: str) -> JSONResponse:
        return JSONResponse({"detail": {"field": field, "error": message} if field else message}, status_code=status)

    def _unknown_job(job_id: str) -> JSONResponse:
        elsewhere = misrouted("rollout job", job_id)
        if elsewhere:
            return error(MISROUTED_STATUS, "id", elsewhere)
        return error(404, "id", f"no rollout job {job_id!r}")

    async def json_body(request: Request) -> Any:
        try:
            return await request.json()
        except ValueError as exc:
            raise RequestError("body", f"is not valid JSON: {exc}") from None

    @router.get("/backends")
    async def list_backends() -> Any:
        service.start()
        return {"backends": service.backends()}

    @router.post("/backends")
    async def add_backend(request: Request) -> Any:
        service.start()
        try:
            body = await json_body(request)
            url = body.get("url") if isinstance(body, dict) else None
            return service.add_backend(url)
        except RequestError as exc:
            return error(422 if exc.field != "body" else 400, exc.field, exc.message)

    @router.delete("/backends")
    async def remove_backend(request: Request) -> Any:
        service.start()
        try:
            body = await json_body(request)
            url = body.get("url") if isinstance(body, dict) else request.query_params.get("url")
            removed = service.remove_backend(url)
        except RequestError as exc:
            return error(422 if exc.field != "body" else 400, exc.field, exc.message)
        if removed is None:
            return error(404, "url", f"no backend {url!r} in the pool")
        return {**removed, "removed": True}

    @router.post("/rollouts")
    async def submit(request: Request) -> Any:
        try:
            job_id = await service.submit(await json_body(request))
        except RequestError as exc:
            return error(422 if exc.field != "body" else 400, exc.field, exc.message)
        except QueueFull as exc:
            return JSONResponse({"detail": str(exc)}, status_code=429, headers={"Retry-After": "1"})
        return {"id": job_id, "status": service.jobs[job_id].status}

    @router.get("/rollouts")
    async def list_jobs() -> Any:
        service.start()
        return {**service.stats(), "ids": {s: [j.id for j in service.jobs.values() if j.status == s] for s in STATUSES}}

    @router.get("/rollouts/{job_id}")
    async def get_job(job_id: str) -> Any:
        service.start()
        view = service.get(job_id)
        return view if view is not None else _unknown_job(job_id)

    @router.delete("/rollouts/{job_id}")
    async def cancel_job(job_id: str) -> Any:
        service.start()
        view = service.cancel(job_id)
        return view if view is not None else _unknown_job(job_id)

    return router


def _service_of(state: Any) -> RolloutService:
    if isinstance(state, RolloutService):
        return state
    if state is not None and not isinstance(state, dict):
        inner = getattr(state, "rollouts", None)
        if inner is None and hasattr(state, "__dict__"):
            inner = getattr(state, "rollout_service", None)
        if isinstance(inner, RolloutService):
            return inner
        if isinstance(inner, dict):
            state = inner
        else:
            state = None
    kwargs = dict(state or {})
    kwargs.setdefault("state_dir", os.environ.get("PIVOT_ROLLOUTS_STATE") or None)
    service = RolloutService(**kwargs)
    return service
