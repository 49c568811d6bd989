"""TRL adapter: pivots as a ``GRPOTrainer`` dataset, the verifiers as its reward, episode envs as its environments.

::

    pip install "pivot-envs[trl]"          # trl>=1.16, datasets

    from trl import GRPOConfig, GRPOTrainer
    from pivot_envs.integrations.trl import make_reward_func, to_dataset

    dataset = to_dataset("bundled:tool_use:train")            # any pivot source (pivot_envs.sources)
    trainer = GRPOTrainer(model=MODEL, reward_funcs=[make_reward_func()], train_dataset=dataset,
                          args=GRPOConfig(...))
    trainer.train()

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
  methods); unlike TRL's SFT/DPO/KTO/Reward trainers it does **not** read a per-row ``tools``
  column. So :func:`to_dataset` puts each pivot's tools into its prompt (Hermes ``<tools>`` block in
  the system message, ``prompt_mode="hermes"``, the default) and also writes the ``tools`` column
  (OpenAI specs as a JSON string, the form TRL's SFT/DPO trainers accept) for other trainers.
* ``environment_factory`` (experimental in 1.16, needs transformers >= 5.2 and a chat template
  that renders tool calls): a zero-argument callable returning an object with ``reset(**row)``
  (returns ``None`` or text appended to the last user message) whose public methods are the tools
  (type hints + Google-style docstrings, schema by ``transformers.utils.get_json_schema``); an
  optional ``get_reward()`` makes it a reward source. TRL runs the tool loop itself (up to
  ``max_tool_calling_iterations``): the model's tool calls are executed by calling those methods
  and their return values become ``tool`` messages. See :func:`episode_environment_factory`.
"""

from __future__ import annotations

import json
import keyword
import re
from typing import Any, Callable

from pivot_envs.integrations._common import pivot_from_json, pivot_json, prompt_messages, score
from pivot_envs.sources import PivotSource, resolve_pivots
from pivot_envs.types import Message, Pivot

__all__ = ["to_dataset", "make_reward_func", "PivotReward", "episode_environment_factory", "TRLEpisodeEnv",
           "make_episode_reward_func", "completion_action"]


def to_dataset(pivots: PivotSource, *, prompt_mode: str = "hermes", domain: str | None = None,
               split: str = "train") -> Any:
    """A ``datasets.Dataset`` of ``pivots`` for TRL's ``GRPOTrainer``.

    Columns: ``prompt`` (conversational messages, see
    :func:`pivot_envs.integrations._common.prompt_messages`), ``tools`` (the pivot's OpenAI tool
    specs as a JSON string), ``pivot_id``, ``domain``, ``pivot`` (the pivot as JSON: what the
    reward rebuilds it from). ``pivots``: any source :func:`pivot_envs.sources.resolve_pivots` takes.
    """
    from datasets import Dataset

    items = resolve_pivots(pivots, domain=domain, split=split)
    if not items:
        raise ValueError("to_dataset got no pivots")
    rows = [{"prompt": prompt_messages(p, prompt_mode), "tools": json.dumps(p.tools, ensure_ascii=False),
             "pivot_id": p.id, "domain": p.domain, "pivot": pivot_json(p)} for p in items]
    return Dataset.from_list(rows)


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
    reward in [0, 1], or ``None`` where the verifier (or the action parser) errored. Each call is
    kept in ``calls`` (``completions``, ``pivot_ids``, ``rewards``, ``errors``) when ``keep_calls``.
    """

    __name__ = "pivot_verifier"  # the name TRL logs the reward under (rewards/pivot_verifier/mean)

    def __init__(self, verifier: Any = None, pivots: PivotSource = None, keep_calls: bool = True):
        from pivot_envs.verifiers.batch import VerifierResolver

        self.resolver = VerifierResolver(verifier)
        self.pivots = {p.id: p for p in resolve_pivots(pivots)} if pivots is not None else {}
        self.keep_calls = keep_calls
        self.calls: list[dict[str, Any]] = []
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
        results = score([completion_action(c) for c in completions], pivots, self.resolver)
        rewards = [None if r.error else float(r.reward) for r in results]
        errors = [r.error for r in results]
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            log_metric("pivot/verifier_errors", float(sum(e is not None for e in errors)))
        if self.keep_calls:
            self.calls.append({"completions": list(completions), "pivot_ids": [p.id for p in pivots],
                               "rewards": list(rewards), "errors": errors})
        return rewards


def make_reward_func(verifier: Any = None, *, pivots: PivotSource = None, keep_calls: bool = True) -> PivotReward:
    """A TRL reward function scoring completions with each pivot's verifier.

    ``verifier``: a name, config or Verifier for every pivot; ``None``: each pivot's domain default.
    A verifier error gives ``None`` (TRL excludes it from the group statistics). See :class:`PivotReward`.
    """
    return PivotReward(verifier, pivots, keep_calls)


# --- episodes: TRL's environment_factory ---------------------------------------------------------

_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "array": "list", "object": "dict"}


class TRLEpisodeEnv:
    """An :class:`~pivot_envs.episode_env.EpisodeEnv` in the shape of a TRL 1.16 environment.

    ``reset(**row)`` starts the row's episode (its ``pivot_id`` or ``task_id`` column; none: the
    next task) and returns ``None`` (the prompt is the dataset's). Each world tool is a public
    method (generated by :func:`episode_environment_factory`) that executes the call in the world
    and returns the tool result text. TRL ends the loop when the model answers without a tool call;
    that answer never reaches the environment, so the reward is :func:`make_episode_reward_func`,
    which feeds the final answer to the episode and returns task success (1.0 / 0.0, ``None`` on an
    infrastructure error).
    """

    _make_env: Callable[[], Any]

    def __init__(self) -> None:
        self.env = type(self)._make_env()
        self._next = 0

    def reset(self, **row: Any) -> None:
        if row.get("pivot_id"):
            options = {"pivot_id": row["pivot_id"]}
        elif row.get("task_id"):
            options = {"task_id": row["task_id"]}
        else:
            options = {"index": self._next}
            self._next += 1
        self.env.reset(options=options)
        return None

    def _tool(self, name: str, arguments: dict[str, Any]) -> str:
        env = self.env
        if env.done:
            return "Error: the episode is over"
        call = {"id": f"call_{env.tool_calls + 1}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}
        before = len(env.messages)
        env.step({"role": "assistant", "content": "", "tool_calls": [call]})
        replies = [m for m in env.messages[before:] if m.get("role") == "tool"]
        if env.error is not None:
            return f"Error: {env.error}"
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


def _tool_method(spec: dict[str, Any]) -> tuple[str, Callable[..., str]]:
    """A method ``name(self, **params) -> str`` with the type hints and Google docstring of ``spec``."""
    fn = spec.get("function", spec)
    name = str(fn["name"])
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_") or name in ("reset", "get_reward"):
        raise ValueError(f"tool {name!r} cannot be a TRL environment method (TRL calls tools by method name)")
    params = fn.get("parameters") or {}
    props: dict[str, Any] = params.get("properties") or {}
    required = set(params.get("required") or [])
    args, mapping, docs = [], {}, []
    for pname, pspec in sorted(props.items(), key=lambda kv: kv[0] not in required):
        ident = _identifier(pname)
        mapping[ident] = pname
        kind = _TYPES.get(str((pspec or {}).get("type")), "str")
        args.append(f"{ident}: {kind}" if pname in required else f"{ident}: {kind} | None = None")
        desc = str((pspec or {}).get("description") or pname).replace("\n", " ")
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
    """A TRL ``environment_factory`` for :class:`~pivot_envs.episode_env.EpisodeEnv` episodes.

    ``tasks`` / ``domain`` / ``env_kwargs`` are EpisodeEnv's; ``user`` defaults to ``"none"``
    because TRL's loop has no user turns (a text answer ends the episode). TRL exposes one fixed
    tool set per environment class, so the class gets one method per tool of the first task (its
    world's tools); tasks with other tools need another factory (or a dict factory with an
    ``environment`` column). Pair it with :func:`make_episode_reward_func` and a dataset whose
    rows carry ``pivot_id`` or ``task_id`` (e.g. :func:`to_dataset` of the episode's pivots)::

        factory = episode_environment_factory("bundled:tool_use:train")
        GRPOTrainer(model=..., train_dataset=dataset, environment_factory=factory,
                    reward_funcs=[make_episode_reward_func()], args=GRPOConfig(...))
    """
    from pivot_envs.episode_env import EpisodeEnv

    def make_env() -> EpisodeEnv:
        return EpisodeEnv(tasks, domain=domain, user=user, **env_kwargs)

    probe = make_env()
    probe.reset(options={"index": 0})
    namespace: dict[str, Any] = {"_make_env": staticmethod(make_env)}
    for spec in probe.tools:
        name, method = _tool_method(spec)
        namespace[name] = method
    probe.close()
    cls = type(f"{(probe.domain_name or 'Episode').title().replace('_', '')}EpisodeEnv", (TRLEpisodeEnv,), namespace)
    return cls


def make_episode_reward_func() -> Callable[..., list[float | None]]:
    """TRL reward function for :func:`episode_environment_factory`: task success of each rollout.

    TRL passes ``environments`` (one per completion); the completion's last assistant message is
    the final answer, handed to the episode before it is judged.
    """

    def episode_success(prompts: list[Any], completions: list[Any], environments: list[Any] | None = None,
                        **_: Any) -> list[float | None]:
        if environments is None:
            raise ValueError("episode_success needs TRL's environments: pass environment_factory= to GRPOTrainer")
        out: list[float | None] = []
        for completion, env in zip(completions, environments):
            final: Any = ""
            if isinstance(completion, list):
                finals = [m for m in completion if isinstance(m, dict) and m.get("role") == "assistant"]
                final = _plain_message(finals[-1]) if finals else ""
                if isinstance(final, dict) and final.get("tool_calls"):
                    final = {"role": "assistant", "content": final.get("content") or ""}
            else:
                final = str(completion)
            out.append(env._finish(final))
        return out

    episode_success.__name__ = "episode_success"
    return episode_success
