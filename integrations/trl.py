"""TRL adapter: pivots as a ``GRPOTrainer`` dataset, the verifiers as its reward, episode envs as its environments.

::

    pip install "pivot-envs[trl]"          # trl>=1.16, datasets

    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from pivot_envs.integrations.trl import make_reward_func, to_dataset

    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    dataset = to_dataset("bundled:tool_use:train", tokenizer=tokenizer)   # the prompts profiling sampled
    trainer = GRPOTrainer(model=MODEL, reward_funcs=[make_reward_func()], train_dataset=dataset,
                          processing_class=tokenizer, args=GRPOConfig(...))
    trainer.train()

Multi-process (``accelerate launch`` / ``torchrun``, see ``examples/trl_pivotrl.py``): TRL's sampler repeats
each prompt ``num_generations`` times in a row and gives each process its own contiguous slice of the
global batch, so every process scores the completions it generated (a group may span processes); the
reward statistics and the metrics logged through ``log_metric`` are gathered over all processes.

What this relies on in TRL 1.16 (``trl/trainer/grpo_trainer.py``):

* ``train_dataset`` needs a ``prompt`` column; a list of ``{"role", "content"}`` messages is the
  *conversational* format, rendered with the tokenizer's chat template and the open assistant turn.
  Every other column is passed to each reward function as a keyword argument, one value per
  completion (``_calculate_rewards``), with ``trainer_state``, ``log_extra``, ``log_metric`` (and
  ``environments`` with an ``environment_factory``).
* A reward function is called ``f(prompts=, completions=, completion_ids=, **columns)``; with
  conversational prompts each completion is a list of messages (``[{"role": "assistant",
  "content": ...}]``, with parsed ``tool_calls`` when the tokenizer has a response schema).
  It returns one float per completion, or ``None``: TRL turns ``None`` into NaN, leaves it out
  of the group mean/std (``nanmean`` / ``nanstd``), and a completion every reward function
  scored ``None`` gets advantage 0 (``_compute_advantages``: ``unscorable_mask``).
* GRPOTrainer renders *one* tool list for all rows (``tools=`` callables, or an environment's
  methods; one per environment name with a dict ``environment_factory``); unlike TRL's
  SFT/DPO/KTO/Reward trainers it does **not** read a per-row ``tools`` column. So
  :func:`to_dataset` with ``tokenizer=`` writes each prompt as the text profiling rendered (the
  pivot's own tools through the template's ``tools=``, the same :class:`PromptConfig`; a plain-text
  prompt TRL tokenizes as is), and without a tokenizer puts the tools into text-only messages
  (Hermes ``<tools>`` block in the system message); it also writes the ``tools`` column (OpenAI
  specs as a JSON string, the form TRL's SFT/DPO trainers accept) for other trainers.
* ``log_metric(name, value)`` values are summed and counted over all processes and logged as their
  mean each step, so :class:`PivotReward` logs one value per sample: the logged figure is the mean
  over every process's samples (``pivot/strict_reward``, ``pivot/miss_rate``, the hack monitor).
* ``environment_factory`` (experimental in 1.16, needs transformers >= 5.2, a chat template that
  renders tool calls and tool messages (``supports_tool_calling``) and a response parser for it
  (``add_response_schema`` knows Qwen, Llama 3.1, ... templates)): a zero-argument callable returning
  an object whose public methods (``inspect.getmembers`` of its class; not ``reset`` /
  ``get_reward`` / ``_private``) are the tools, rendered with ``apply_chat_template(tools=methods)``
  (schema by ``transformers.utils.get_json_schema``: type hints + Google docstring). Instances are
  pooled (one per rollout, reused across batches); before generation each gets ``reset(**row)`` with
  its rollout's whole dataset row (``prompt`` included) and returns ``None`` or text appended to the
  last user message. TRL runs the tool loop itself (up to ``max_tool_calling_iterations``): parsed
  tool calls become ``method(**arguments)`` calls, their ``str`` results ``tool`` messages, and an
  exception a ``{"error": ...}`` result counted in ``tools/failure_frequency``; the loop ends at a
  message without tool calls, which no environment sees. An optional no-argument ``get_reward()``
  makes the env a reward source; reward functions also get ``environments`` (one per completion).
  See :func:`episode_dataset`, :func:`episode_environment_factory`, :func:`make_episode_reward_func`.
"""

from __future__ import annotations

import json
import keyword
import re
from collections import deque
from typing import Any, Callable

from pivot_envs.agents.prompting import PromptConfig, chat_messages
from pivot_envs.integrations._common import (
    pivot_from_json,
    pivot_json,
    prompt_config,
    prompt_messages,
    rendered_prompt,
    score_actions,
)
from pivot_envs.verifiers.declaration import CATEGORIES
from pivot_envs.verifiers.base import build_verifier
from pivot_envs.verifiers.batch import VerifierResolver, verify_batch
from pivot_envs.verifiers.hack_monitor import HACKS, category_key, hack_counts

from pivot_envs.episodes import EpisodeEnv, bundled_domain, resolve_tasks
from pivot_envs.sources import PivotSource, resolve_pivots
from pivot_envs.types import Message, Pivot, VerifyResult

__all__ = ["to_dataset", "make_reward_func", "PivotReward", "pivot_metrics", "check_launch", "check_scored", "episode_dataset", "episode_environment_factory",
           "TRLEpisodeEnv", "make_episode_reward_func", "EpisodeReward", "completion_action"]


def to_dataset(pivots: PivotSource, *, tokenizer: Any = None, prompt: PromptConfig | None = None,
               prompt_mode: str = "hermes", domain: str | None = None, split: str = "train") -> Any:
    """A ``datasets.Dataset`` of ``pivots`` for TRL's ``GRPOTrainer``.

    Columns: ``prompt``, ``tools`` (the pivot's OpenAI tool specs as a JSON string), ``pivot_id``,
    ``domain``, ``pivot`` (the pivot as JSON: what the reward rebuilds it from). ``pivots``: any source
    :func:`pivot_envs.sources.resolve_pivots` takes.

    With ``tokenizer`` (a tokenizer or a folder / hub id to load one from; give GRPOTrainer the same as
    ``processing_class``), ``prompt`` is the prompt text exactly as ``pivot-envs profile`` and the bundled
    trainers render it (:func:`pivot_envs.integrations._common.rendered_prompt`; ``prompt``: the
    :class:`PromptConfig`, default the one recorded with the model, see
    :func:`~pivot_envs.integrations._common.prompt_config`): TRL tokenizes that text into the very ids
    profiling sampled from, so D_adv is measured on the prompts that are trained. Without a tokenizer it
    is conversational messages in ``prompt_mode`` (:func:`~pivot_envs.integrations._common.prompt_messages`),
    which TRL renders with the chat template: the profiled prompt only for templates that know neither
    tools nor the ``tool`` role.
    """
    from datasets import Dataset

    items = resolve_pivots(pivots, domain=domain, split=split)
    if not items:
        raise ValueError("to_dataset got no pivots")
    if tokenizer is None:
        if prompt is not None:
            raise ValueError("to_dataset: prompt= (a PromptConfig) needs tokenizer=: the config is applied by "
                             "rendering with the tokenizer's chat template")
        texts: list[Any] = [prompt_messages(p, prompt_mode) for p in items]
    else:
        if isinstance(tokenizer, str):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        config = prompt if prompt is not None else prompt_config(tokenizer)
        texts = [rendered_prompt(p, tokenizer, config).tokenizer_text for p in items]
    rows = [{"prompt": text, "tools": json.dumps(p.tools, ensure_ascii=False),
             "pivot_id": p.id, "domain": p.domain, "pivot": pivot_json(p)} for text, p in zip(texts, items)]
    return Dataset.from_list(rows)


def _calls_window(keep_calls: int) -> deque:
    """The bounded record of a reward function's latest calls (``keep_calls`` of them; 0 keeps none)."""
    if isinstance(keep_calls, bool) or not isinstance(keep_calls, int) or keep_calls < 0:
        raise ValueError(f"keep_calls is the number of latest calls kept (an integer >= 0; 0 keeps none), got "
                         f"{keep_calls!r}")
    return deque(maxlen=keep_calls)


def completion_action(completion: str | list[Message]) -> str | Message:
    """The action of a TRL completion: the text (standard format), or the first assistant message
    of a conversational completion (the turn at the pivot; later messages are tool loop turns):
    the message when TRL parsed tool calls out of it, else its text."""
    if isinstance(completion, str):
        return completion
    for message in completion:
        if isinstance(message, dict) and message.get("role", "assistant") == "assistant":
            plain = _plain_message(message)
            # without parsed tool calls, the text goes to the domain's parser (Hermes <tool_call>, JSON, ...)
            return plain if plain.get("tool_calls") else plain["content"]
    return ""


def _plain_message(message: Message) -> Message:
    content = message.get("content")
    if isinstance(content, list):  # content blocks
        content = "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    out: Message = {"role": "assistant", "content": content or ""}
    if message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    return out


class PivotReward:
    """TRL reward function: each completion scored by its pivot's verifier (one ``verify_batch`` per call).

    Reads the ``pivot`` column (JSON) of :func:`to_dataset`; a pivot given at construction can
    stand in for it (``pivots=``, looked up by the ``pivot_id`` column). Returns the verifier's
    reward in [0, 1], or ``None`` where the verifier (or the action parser) errored.

    PivotRL's own figures go through TRL's ``log_metric`` (logged beside ``rewards/pivot_verifier/mean``),
    one value per sample, so that the mean TRL logs is over every process's samples:

    * ``pivot/strict_reward``: the strict verifier's reward (``strict_verifier``, default ``"strict"``:
      exact match with the expert; ``None`` turns these two off), over samples both verifiers scored;
    * ``pivot/miss_rate``: P[strict = 0 | the verifier passed] (the bundled trainer's ``miss_rate``);
    * the hack monitor (:mod:`pivot_envs.verifiers.hack_monitor`) over the accepted samples:
      ``hack/more_calls``, ``hack/stop_at_call``, ``hack/long_answer`` and ``accepted_by/<category>``
      (shares; ``pivot/accept_rate`` is the share of scored samples accepted);
    * ``pivot/verifier_errors``: errored samples per call.

    The latest ``keep_calls`` calls (default 0: none) are kept in ``calls`` (``completions``,
    ``pivot_ids``, ``rewards``, ``errors``, ``strict``), a window that never grows past it;
    ``n_calls`` counts them all.
    """

    __name__ = "pivot_verifier"  # the name TRL logs the reward under (rewards/pivot_verifier/mean)

    def __init__(self, verifier: Any = None, pivots: PivotSource = None, keep_calls: int = 0,
                 strict_verifier: Any = "strict"):
        self.resolver = VerifierResolver(verifier)
        self.strict = build_verifier(strict_verifier) if strict_verifier is not None else None
        self.pivots = {p.id: p for p in resolve_pivots(pivots)} if pivots is not None else {}
        self.calls: deque = _calls_window(keep_calls)
        self.n_calls = 0
        self.n_scored = 0  # samples the verifier scored (all calls)
        self.n_unscored = 0  # samples it could not score (an error: None to TRL)
        self._cache: dict[str, Pivot] = {}

    def _pivot(self, serialised: str | None, pivot_id: str | None) -> Pivot:
        if serialised is not None:
            if serialised not in self._cache:
                if len(self._cache) > 4096:
                    self._cache.clear()
                self._cache[serialised] = pivot_from_json(serialised)
            return self._cache[serialised]
        if pivot_id is not None and pivot_id in self.pivots:
            return self.pivots[pivot_id]
        raise KeyError(f"no pivot for row (pivot_id={pivot_id!r}): the dataset needs the 'pivot' column of "
                       "to_dataset, or pass pivots= to make_reward_func")

    def __call__(self, prompts: list[Any], completions: list[Any], pivot: list[str] | None = None,
                 pivot_id: list[str] | None = None, **kwargs: Any) -> list[float | None]:
        n = len(completions)
        pivots = [self._pivot(pivot[i] if pivot is not None else None, pivot_id[i] if pivot_id is not None else None)
                  for i in range(n)]
        actions, results = score_actions([completion_action(c) for c in completions], pivots, self.resolver)
        rewards = [None if r.error else float(r.reward) for r in results]
        errors = [r.error for r in results]
        strict = self._strict(actions, pivots)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            log_metric("pivot/verifier_errors", float(sum(e is not None for e in errors)))
            for name, value in pivot_metrics(actions, pivots, results, strict):
                log_metric(name, value)
        self.n_calls += 1
        self.n_unscored += sum(r is None for r in rewards)
        self.n_scored += len(rewards) - sum(r is None for r in rewards)
        if self.calls.maxlen:
            self.calls.append({"completions": list(completions), "pivot_ids": [p.id for p in pivots],
                               "rewards": list(rewards), "errors": errors,
                               "strict": [None if s is None or s.error else float(s.reward) for s in strict]})
        return rewards

    def _strict(self, actions: list[Any], pivots: list[Pivot]) -> list[VerifyResult | None]:
        """The strict verifier's verdict of each parsed action (``None``: unparsed, or the strict verifier is off)."""
        out: list[VerifyResult | None] = [None] * len(actions)
        keep = [i for i, a in enumerate(actions) if a is not None]
        if self.strict is None or not keep:
            return out
        for i, r in zip(keep, verify_batch([actions[i] for i in keep], [pivots[i] for i in keep], self.strict)):
            out[i] = r
        return out


def pivot_metrics(actions: list[Any], pivots: list[Pivot], results: list[VerifyResult],
                  strict: list[VerifyResult | None]) -> list[tuple[str, float]]:
    """PivotRL's figures of one batch as ``(name, value)`` pairs, one per sample it counts in (see
    :class:`PivotReward`): the mean of a name's values is its figure, also over several processes."""
    out: list[tuple[str, float]] = []
    for action, pivot, result, s in zip(actions, pivots, results, strict):
        if action is None or result.error is not None:
            continue
        strict_known = s is not None and s.error is None
        if strict_known:
            out.append(("pivot/strict_reward", float(s.reward)))
            if result.passed:
                out.append(("pivot/miss_rate", 1.0 if float(s.reward) == 0 else 0.0))
        out.append(("pivot/accept_rate", 1.0 if result.passed else 0.0))
        if not result.passed:
            continue
        counts = hack_counts([action], [pivot], [result],
                             [bool(s.passed)] if strict_known else None).counts()
        out += [(name, float(counts[name])) for name in (*HACKS, *(category_key(c) for c in CATEGORIES))]
    return out


def make_reward_func(verifier: Any = None, *, pivots: PivotSource = None, keep_calls: int = 0,
                     strict_verifier: Any = "strict") -> PivotReward:
    """A TRL reward function scoring completions with each pivot's verifier.

    ``verifier``: a name, config or Verifier for every pivot; ``None``: each pivot's domain default.
    A verifier error gives ``None`` (TRL excludes it from the group statistics). ``strict_verifier``:
    the verifier of ``pivot/strict_reward`` and ``pivot/miss_rate`` (``None``: not computed);
    ``keep_calls``: how many of the latest calls to keep in ``calls`` (0: none). See :class:`PivotReward`.
    """
    return PivotReward(verifier, pivots, keep_calls, strict_verifier)


def check_launch(trainer: Any) -> None:
    """Refuse a launch that would train other than it says: the processes launched (``WORLD_SIZE``) are not the
    processes training together, or the accelerate config's FSDP / DeepSpeed was dropped.

    accelerate does both silently: on a machine without GPUs, ``accelerate launch`` of an FSDP config starts
    processes that each train alone (``DistributedType.NO``) unless the script asks for the CPU
    (``use_cpu``), and then trains plain DDP over gloo, FSDP left out. Call it after building the trainer.
    """
    import os

    accelerator = trainer.accelerator
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if accelerator.num_processes != world:
        raise RuntimeError(f"{world} processes were launched but each trains alone ({accelerator.num_processes} "
                           f"in the run, distributed type {accelerator.distributed_type.name}): on a machine "
                           "without GPUs give GRPOConfig(use_cpu=True) (the examples' --cpu)")
    for flag, wanted in (("ACCELERATE_USE_FSDP", "FSDP"), ("ACCELERATE_USE_DEEPSPEED", "DEEPSPEED")):
        if os.environ.get(flag, "false").lower() == "true" and accelerator.distributed_type.name != wanted:
            raise RuntimeError(f"the accelerate config asks for {wanted} but the run is "
                               f"{accelerator.distributed_type.name}: accelerate applies {wanted} on GPUs only; "
                               "use examples/accelerate/ddp.yaml on CPU")


# --- episodes: TRL's environment_factory ---------------------------------------------------------

_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "array": "list", "object": "dict"}
_RESERVED = frozenset({"reset", "get_reward", "env", "tool_names", "turn_rewards"})
"""Names a world tool cannot have: TRL's hooks (``reset``, ``get_reward``) and the attributes of
:class:`TRLEpisodeEnv` (an instance attribute would hide the tool from TRL's ``getattr``)."""


def episode_dataset(tasks: Any = None, *, domain: str | None = None, split: str = "train",
                    min_reward: float | None = 1.0) -> Any:
    """A ``datasets.Dataset`` of episode starts for ``GRPOTrainer(environment_factory=...)``.

    One row per task of ``tasks`` (any source :class:`~pivot_envs.episodes.EpisodeEnv` takes):
    ``prompt``, the messages an episode starts from (up to and including the first user message,
    the system prompt kept), and ``task_id``, which TRL passes to ``reset`` with the rest of the
    row. The tools are *not* in the prompt text: TRL renders the environment's tool methods with
    the chat template (``apply_chat_template(tools=...)``). Use the same ``tasks``, ``domain`` and
    ``min_reward`` as :func:`episode_environment_factory`.
    """
    from datasets import Dataset

    items = resolve_tasks(tasks, domain=domain or bundled_domain(tasks), split=split, min_reward=min_reward)
    if not items:
        raise ValueError("episode_dataset got no tasks")
    rows = []
    for task in items:
        first_user = next(i for i, m in enumerate(task.messages) if m.get("role") == "user")
        start = task.messages[: first_user + 1]
        if any(m.get("tool_calls") or m.get("role") == "tool" for m in start):
            raise ValueError(f"task {task.id!r} has tool calls before its first user message: its start is not a "
                             "plain-text prompt")
        rows.append({"prompt": [{"role": m["role"], "content": m["content"]} for m in chat_messages(start)],
                     "task_id": task.id})
    return Dataset.from_list(rows)


class TRLEpisodeEnv:
    """An :class:`~pivot_envs.episodes.EpisodeEnv` in the shape of a TRL 1.16 environment.

    TRL builds the instances with the factory (no arguments), keeps them in a pool and, for every
    rollout of a batch, calls ``reset(**row)`` with the rollout's dataset row. ``reset`` starts the
    row's episode: its ``pivot_id`` column (an episode from a pivot's context), else its
    ``task_id`` (the task's first turn, :func:`episode_dataset`); a row with neither is an error
    (the prompt would not be the episode's). It returns ``None``: the prompt is the dataset's.

    Each world tool is a public method (generated by :func:`episode_environment_factory`, its
    schema the tool's) that executes the call in the world and returns the tool result text; TRL
    calls them for the tool calls it parses out of the completion and makes the return values
    ``tool`` messages. A call the episode cannot execute (a world failure, the episode already
    over) raises, which TRL reports as a tool failure. TRL ends the loop when the model answers
    without a tool call; that answer never reaches the environment, so there is no ``get_reward``:
    the reward is :func:`make_episode_reward_func`, which feeds the final answer to the episode
    and returns its task success (or, with ``per_turn=``, a summary of its per-turn rewards).

    ``turn_rewards`` lists the episode's per-turn rewards so far (``EpisodeEnv.scorer.rewards``: the
    verifier's reward for each turn while the rollout is on the expert's path, ``None`` off it; see
    :mod:`pivot_envs.episodes`). TRL runs each tool call as its own turn, so an expert turn with
    several calls leaves the path at its first call (its reward is the one call against them all).
    """

    _make_env: Callable[[], Any]
    tool_names: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.env = type(self)._make_env()

    def reset(self, **row: Any) -> None:
        if row.get("pivot_id"):
            options = {"pivot_id": row["pivot_id"]}
        elif row.get("task_id"):
            options = {"task_id": row["task_id"]}
        else:
            raise ValueError("the dataset row has no task_id or pivot_id column: the episode would not be the "
                             f"prompt's (columns: {sorted(row)}); build the dataset with episode_dataset()")
        self.env.reset(options=options)
        names = {str((t.get("function") or t).get("name")) for t in self.env.tools}
        if names != set(self.tool_names):
            raise ValueError(f"task {self.env.task.id!r} has the tools {sorted(names)}, this environment class "
                             f"{sorted(self.tool_names)}: TRL exposes one tool set per class; use one factory per "
                             "tool set (a dict environment_factory with an 'environment' column)")
        return None

    @property
    def turn_rewards(self) -> list[float | None]:
        """The per-turn rewards of the episode so far, one per agent turn (``None`` off the expert's path)."""
        return list(self.env.scorer.rewards)

    def _tool(self, name: str, arguments: dict[str, Any]) -> str:
        env = self.env
        if env.done:
            raise RuntimeError(f"the episode is over ({env.turns} turns of max_turns={env.max_turns}); "
                               f"{name} was not executed")
        call = {"id": f"call_{env.tool_calls + 1}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}
        before = len(env.messages)
        env.step({"role": "assistant", "content": "", "tool_calls": [call]})
        if env.error is not None:
            raise RuntimeError(f"the world failed: {env.error}")
        replies = [m for m in env.messages[before:] if m.get("role") == "tool"]
        return str(replies[-1].get("content") or "") if replies else ""

    def _finish(self, answer: str | Message) -> float | None:
        """Hand the final answer to the episode (if it is still open) and return its reward."""
        env = self.env
        if env.task is None:
            return None
        if not env.done:
            env.step(answer if isinstance(answer, dict) else {"role": "assistant", "content": str(answer)})
            if not env.done:  # a user simulator kept the conversation going: judge it where it stands
                env.done = True
                env._judge(truncated=True)
        if env.error is not None or env.success is None:
            return None
        return 1.0 if env.success else 0.0


def _identifier(name: str) -> str:
    out = re.sub(r"\W", "_", name)
    if not out or out[0].isdigit() or keyword.iskeyword(out):
        out = "p_" + out
    return out


def _hint(pspec: dict[str, Any]) -> str:
    """The Python type hint of a JSON-schema property (what ``get_json_schema`` turns back into it)."""
    kind = _TYPES.get(str(pspec.get("type")), "str")
    if kind == "list":
        item = _TYPES.get(str((pspec.get("items") or {}).get("type")))
        if item in ("str", "int", "float", "bool"):
            return f"list[{item}]"
    return kind


def _tool_method(spec: dict[str, Any]) -> tuple[str, Callable[..., str]]:
    """A method ``name(self, **params) -> str`` whose type hints and Google docstring give back the
    schema of ``spec`` under ``transformers.utils.get_json_schema`` (what TRL renders): types, array
    item types, required and optional parameters, descriptions, ``enum`` as ``(choices: ...)``;
    a default is named in the description."""
    fn = spec.get("function", spec)
    name = str(fn["name"])
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_") or name in _RESERVED:
        raise ValueError(f"tool {name!r} cannot be a TRL environment method (TRL calls tools by method name)")
    params = fn.get("parameters") or {}
    props: dict[str, Any] = params.get("properties") or {}
    required = set(params.get("required") or [])
    args, mapping, docs = [], {}, []
    for pname, pspec in sorted(props.items(), key=lambda kv: kv[0] not in required):
        pspec = pspec or {}
        ident = _identifier(pname)
        if ident in mapping:
            raise ValueError(f"tool {name!r}: parameters {mapping[ident]!r} and {pname!r} map to one name {ident!r}")
        mapping[ident] = pname
        hint = _hint(pspec)
        args.append(f"{ident}: {hint}" if pname in required else f"{ident}: {hint} | None = None")
        desc = " ".join(str(pspec.get("description") or pname).split())
        if "default" in pspec:
            desc += f" Default: {json.dumps(pspec['default'], ensure_ascii=False)}."
        if isinstance(pspec.get("enum"), list) and pspec["enum"]:
            desc += f" (choices: {json.dumps(pspec['enum'], ensure_ascii=False)})"
        docs.append(f"    {ident}: {desc}")
    description = str(fn.get("description") or name).replace('"""', "'''")
    doc = description + ("\n\nArgs:\n" + "\n".join(docs) if docs else "") + "\n\nReturns:\n    The tool's result."
    source = (f"def {name}(self{', ' if args else ''}{', '.join(args)}) -> str:\n"
              f"    _a = {{_m[k]: v for k, v in locals().items() if k != 'self' and v is not None}}\n"
              f"    return self._tool({name!r}, _a)\n")
    scope: dict[str, Any] = {"_m": mapping}
    exec(source, scope)  # noqa: S102 - the source is built from identifiers checked above
    method = scope[name]
    method.__doc__ = doc
    return name, method


def episode_environment_factory(tasks: Any = None, *, domain: str | None = None, user: Any = "none",
                                **env_kwargs: Any) -> Callable[[], TRLEpisodeEnv]:
    """A TRL ``environment_factory`` for :class:`~pivot_envs.episodes.EpisodeEnv` episodes.

    Returns a :class:`TRLEpisodeEnv` subclass (calling it with no arguments is the factory): one
    method per tool of the first task (its world's tools), as TRL exposes one fixed tool set per
    environment class; ``reset`` refuses a task with other tools (give those their own factory in
    a dict ``environment_factory`` with an ``environment`` column). ``tasks`` / ``domain`` /
    ``env_kwargs`` are EpisodeEnv's (the tasks are read once and shared by the instances);
    ``user`` defaults to ``"none"`` because TRL's loop has no user turns (a text answer ends the
    episode). Pair it with :func:`episode_dataset` of the same tasks and
    :func:`make_episode_reward_func`, and a tokenizer whose chat template renders tools and tool
    calls and whose response TRL can parse (``trl.chat_template_utils.add_response_schema``)::

        factory = episode_environment_factory("bundled:search:train")
        GRPOTrainer(model=..., train_dataset=episode_dataset("bundled:search:train"),
                    environment_factory=factory, reward_funcs=[make_episode_reward_func()],
                    args=GRPOConfig(...))

    Where TRL's loop and an episode differ:

    * the dataset is required: TRL's dataset-less mode feeds placeholder rows and only appends
      ``reset``'s text to an empty user message (no system prompt, no task id to keep a group's
      rollouts on one task), so a row without ``task_id`` / ``pivot_id`` is refused;
    * TRL calls a turn's tool calls one method at a time, so each becomes its own assistant turn
      in the episode (``max_turns`` counts them), and the text beside a tool call is not kept;
    * TRL executes a tool call before it checks the length budget: a result it then drops
      (``max_completion_length``) was still executed in the world, which the episode remembers;
    * a final message that still has tool calls (``max_tool_calling_iterations`` reached) ends
      the episode with its text; its calls are not run.
    """
    probe = EpisodeEnv(tasks, domain=domain, user=user, **env_kwargs)
    probe.reset(options={"index": 0})
    resolved, domain_name = probe.tasks, probe.domain_name or None

    def make_env() -> EpisodeEnv:
        return EpisodeEnv(resolved, domain=domain_name, user=user, **env_kwargs)

    namespace: dict[str, Any] = {"_make_env": staticmethod(make_env)}
    names = []
    for spec in probe.tools:
        name, method = _tool_method(spec)
        namespace[name] = method
        names.append(name)
    namespace["tool_names"] = tuple(names)
    probe.close()
    return type(f"{(probe.domain_name or 'Episode').title().replace('_', '')}EpisodeEnv", (TRLEpisodeEnv,), namespace)


def _final_answer(completion: str | list[Message]) -> str | Message:
    """The final answer of a TRL rollout: its last assistant message, without tool calls (TRL stops
    the loop at a message without tool calls; one that still has them was cut off by
    ``max_tool_calling_iterations`` or the length limit, and its calls were not run for it)."""
    if not isinstance(completion, list):
        return str(completion)
    finals = [m for m in completion if isinstance(m, dict) and m.get("role", "assistant") == "assistant"]
    if not finals:
        return ""
    return {"role": "assistant", "content": _plain_message(finals[-1])["content"]}


PER_TURN = {"mean": "episode_turn_mean", "progress": "episode_progress"}
"""The per-turn summaries :class:`EpisodeReward` can return, and the names TRL logs them under."""


class EpisodeReward:
    """TRL reward function for :func:`episode_environment_factory`: the task success of each rollout,
    or with ``per_turn`` a summary of its per-turn rewards (``EpisodeEnv.scorer.rewards``, an off-path
    turn counting 0): ``"mean"``, their mean over the rollout's turns; ``"progress"``, their sum over
    the expert's turns from the episode's start (how much of the expert's path the rollout followed;
    a rollout that stops early or strays scores below 1). A per-turn verifier failure gives ``None``.
    Pass several to GRPOTrainer (``reward_funcs=[make_episode_reward_func(), make_episode_reward_func(
    per_turn="progress")]``, with ``reward_weights``): the final answer is handed to the episode once.

    TRL passes ``environments`` (one per completion, in order); the completion's last assistant
    message is the final answer, handed to the episode before it is judged. Returns 1.0 / 0.0 (or the
    per-turn summary in [0, 1]), or ``None`` on an infrastructure error (TRL leaves it out of the
    group statistics). Logs ``episode/tool_calls`` (mean per rollout, as the world executed them).
    Each call is kept in ``calls`` (``prompts`` and ``completions`` as TRL passed them,
    ``row_task_ids``: the rows' ``task_id`` column, ``task_ids``: the tasks the envs played,
    ``rewards``, ``turn_rewards``: each rollout's per-turn rewards, ``episodes``: each rollout's
    :meth:`~pivot_envs.episodes.EpisodeEnv.episode_row`) for the latest ``keep_calls`` calls (default 0:
    none; a window that never grows past it); ``n_calls`` counts them all.
    """

    __name__ = "episode_success"  # the name TRL logs the reward under (rewards/episode_success/mean)

    def __init__(self, keep_calls: int = 0, per_turn: str | None = None):
        if per_turn is not None and per_turn not in PER_TURN:
            raise ValueError(f"per_turn must be None (task success) or one of {sorted(PER_TURN)}, got {per_turn!r}")
        self.per_turn = per_turn
        if per_turn is not None:
            self.__name__ = PER_TURN[per_turn]
        self.calls: deque = _calls_window(keep_calls)
        self.n_calls = 0
        self.n_scored = 0  # rollouts scored (all calls)
        self.n_unscored = 0  # rollouts that could not be scored (an infrastructure error: None to TRL)

    def _reward(self, env: Any, answer: str | Message) -> float | None:
        """One rollout's reward: task success, or the per-turn summary (see the class docstring)."""
        success = env._finish(answer)  # hands the answer to the episode (once) and judges it
        if self.per_turn is None:
            return success
        episode = env.env
        if episode.task is None or episode.error is not None or not episode.score_turns or episode.scorer.errors:
            return None
        total = sum(r for r in episode.scorer.rewards if r is not None)
        if self.per_turn == "mean":
            return total / len(episode.scorer.rewards) if episode.scorer.rewards else 0.0
        return min(1.0, total / episode.expert_turns) if episode.expert_turns else 0.0

    def __call__(self, prompts: list[Any], completions: list[Any], environments: list[Any] | None = None,
                 **kwargs: Any) -> list[float | None]:
        if environments is None:
            raise ValueError(f"{self.__name__} needs TRL's environments: pass environment_factory= to GRPOTrainer")
        if len(environments) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(environments)} environments")
        rewards = [self._reward(env, _final_answer(c)) for c, env in zip(completions, environments)]
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and environments:
            log_metric("episode/tool_calls", sum(e.env.tool_calls for e in environments) / len(environments))
        self.n_calls += 1
        self.n_unscored += sum(r is None for r in rewards)
        self.n_scored += len(rewards) - sum(r is None for r in rewards)
        if self.calls.maxlen:
            self.calls.append({
                "prompts": list(prompts),
                "completions": list(completions),
                "row_task_ids": list(kwargs["task_id"]) if kwargs.get("task_id") is not None else None,
                "task_ids": [e.env.task.id if e.env.task is not None else None for e in environments],
                "rewards": list(rewards),
                "turn_rewards": [list(e.env.scorer.rewards) for e in environments],
                "episodes": [json.loads(json.dumps(e.env.episode_row(), ensure_ascii=False, default=str))
                             if e.env.task is not None else None for e in environments],
            })
        return rewards


def check_scored(reward: Any) -> None:
    """Raise when ``reward`` (a :func:`make_reward_func` or :func:`make_episode_reward_func` reward) scored no
    sample in this process while it was called: a run whose every reward was an error must not end as a
    success (TRL leaves ``None`` rewards out and trains on nothing)."""
    if reward.n_calls and not reward.n_scored:
        raise RuntimeError(f"{reward.__name__}: none of the {reward.n_unscored} samples of this process could be "
                           "scored (every verifier or world call failed; see the pivot/verifier_errors metric); "
                           "the run trained on nothing")


def make_episode_reward_func(keep_calls: int = 0, *, per_turn: str | None = None) -> EpisodeReward:
    """TRL reward function for :func:`episode_environment_factory`: task success of each rollout, or
    with ``per_turn="mean"`` / ``"progress"`` a summary of its per-turn rewards (see :class:`EpisodeReward`);
    ``keep_calls``: how many of the latest calls to keep in ``calls`` (0: none)."""
    return EpisodeReward(keep_calls, per_turn)
