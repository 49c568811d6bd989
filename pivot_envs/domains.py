"""Agentic domains: what makes ``pivot/<Domain>-v0`` a distinct env.

A :class:`Domain` names the env id, the default verifier, how pivots are
extracted from its trajectories, and where its bundled data lives. Built-ins are
folders of :mod:`pivot_envs.envs_data`, registered by :mod:`pivot_envs.builtin_domains`; users add their own with
:func:`register_domain`, and third-party packages publish one through the
``pivot_envs.domains`` entry-point group (the entry point loads to a
:class:`Domain` or to a zero-argument callable returning one)::

    # a plugin's pyproject.toml
    [project.entry-points."pivot_envs.domains"]
    recipes = "my_pkg.domain:DOMAIN"
"""

from __future__ import annotations

import copy
import inspect
import warnings
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Callable

import gymnasium

from pivot_envs.actions import parse_action
from pivot_envs.types import Action, Message, Pivot
from pivot_envs.worlds.base import use_world_keys_of
from pivot_envs.worlds.registry import refuse_world_instance, world_plugin_errors

ENTRY_POINT_GROUP = "pivot_envs.domains"

_DOMAINS: dict[str, "Domain"] = {}
_PLUGINS_LOADED: list[bool] = []  # a one-slot flag: entry points are read once per process
_PLUGIN_ERRORS: list[str] = []


@dataclass
class Domain:
    """An agentic domain.

    Attributes:
        name: short identifier used on the CLI and in pivot files (``tool_use``).
        env_id: gymnasium id, ``pivot/<Name>-v0``.
        description: one line shown by ``pivot-envs list``.
        default_verifier: the verifier used when the env is made without ``verifier=``: a fixed spec
            (a verifier name or config dict), or a *recipe*, a callable returning one; a recipe is called
            with no argument, or with ``judge=CONFIG`` when a judge is asked for
            (:func:`pivot_envs.verifiers.defaults.default_verifier_spec`), which it adds as its last
            resort. The built-in domains' recipes are in their folders' ``domain.py``
            (``pivot_envs/envs_data/<domain>/``).
        skip_chat_only: extraction skips assistant turns without tool calls. Leave it ``False`` (the default)
            where episodes end with an answer: the turn that ends the task, or answers the user, is then a pivot
            (the decision to stop is an action), and a default verifier built with ``final_turn`` scores it
            (another tool call 0, an answer without the expert answer's facts 0). ``True`` only for domains
            whose episodes end with a tool call and whose text turns are commentary (the built-in ``swe``:
            ``submit``).
        fixture_mode: ``"static"`` (every pivot gets the trajectory's fixture) or
            ``"replay"`` (the fixture's setup is extended with the episode's earlier
            shell commands, so the state at the turn is rebuilt by replaying them).
        command_argument: for ``replay``: the tool-call argument holding the shell command.
        load_pivots: ``split -> list[Pivot]`` for the bundled data, or ``None`` when the
            domain ships no data (then ``pivots=`` is required).
        parse_action: turns raw model text (or a message dict) into an :class:`Action`.
        world: the world behind the domain's tools, as a spec that builds a fresh world for every
            episode env and verifier: a built-in or registered world's name
            (:func:`pivot_envs.worlds.register_world`), ``mcp:COMMAND``, a config dict, a
            :class:`~pivot_envs.worlds.World` subclass or a zero-argument factory (see
            :mod:`pivot_envs.worlds`); a World *instance* is refused (``TypeError``: it would be
            shared by every episode); ``None``: the domain has no world (pivots only).
        world_keys: the trajectory ``meta`` keys that configure the world of a task (e.g.
            ``world_seed``); extraction copies them into each pivot's ``meta["world"]["config"]``.
        success_rules: the rules an episode must pass to succeed, registered names or rule objects
            (:mod:`pivot_envs.success`: ``state``, ``facts``, ``answer``, ``tests``, or your own);
            ``None``: ``state`` + ``facts``.
        finish_tools: tool names whose call ends an episode (the built-in ``swe``: ``submit``).
        episode_env_id: gymnasium id of the domain's whole-task env
            (:class:`pivot_envs.episodes.EpisodeEnv`), registered when the domain has a ``world``;
            ``None``: derived from ``env_id`` (``pivot/ToolUse-v0`` -> ``pivot/ToolUse-Episode-v0``).
    """

    name: str
    env_id: str
    description: str = ""
    default_verifier: Any = "strict"
    skip_chat_only: bool = False
    fixture_mode: str = "static"
    command_argument: str = "command"
    load_pivots: Callable[[str], list[Pivot]] | None = None
    parse_action: Callable[[str | Message], Action] = field(default=parse_action)
    world: Any = None
    world_keys: tuple[str, ...] = ()
    success_rules: tuple[Any, ...] | None = None
    finish_tools: tuple[str, ...] = ()
    episode_env_id: str | None = None

    def __post_init__(self) -> None:
        refuse_world_instance(self.world, f"Domain {self.name!r}: world")
        if self.episode_env_id is None:
            base = self.env_id[: -len("-v0")] if self.env_id.endswith("-v0") else self.env_id
            self.episode_env_id = f"{base}-Episode-v0"

    def verifier_spec(self, *, judge: dict[str, Any] | None = None) -> Any:
        """The default verifier spec: the recipe's result (given ``judge`` when one is asked for), or a copy
        of the fixed spec (which has no place for a judge: it is used as it is)."""
        spec = self.default_verifier
        if callable(spec):
            return spec(judge=judge) if judge is not None and _takes_judge(spec) else spec()
        return copy.deepcopy(spec) if isinstance(spec, dict) else spec


def _takes_judge(recipe: Callable[..., Any]) -> bool:
    """Whether a verifier recipe accepts ``judge=`` (a user's zero-argument recipe is called without it)."""
    try:
        params = inspect.signature(recipe).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "judge" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def register_domain(domain: Domain, *, replace: bool = False) -> Domain:
    """Register ``domain`` and its gymnasium env id. Raises if the name is taken (unless ``replace``)."""
    if not isinstance(domain, Domain):
        raise TypeError(f"register_domain expects a pivot_envs.domains.Domain, got {type(domain).__name__}")
    refuse_world_instance(domain.world, f"domain {domain.name!r}: world")
    if domain.fixture_mode not in ("static", "replay"):
        raise ValueError(f"domain {domain.name!r}: fixture_mode must be 'static' or 'replay'")
    if domain.name in _DOMAINS and not replace:
        raise ValueError(f"domain {domain.name!r} is already registered; pass replace=True to override it")
    _DOMAINS[domain.name] = domain
    if domain.env_id in gymnasium.registry:
        del gymnasium.registry[domain.env_id]
    gymnasium.register(id=domain.env_id, entry_point="pivot_envs.env:PivotEnv", kwargs={"domain": domain.name})
    if domain.world is not None and domain.episode_env_id:
        if domain.episode_env_id in gymnasium.registry:
            del gymnasium.registry[domain.episode_env_id]
        gymnasium.register(id=domain.episode_env_id, entry_point=EPISODE_ENTRY_POINT, kwargs={"domain": domain.name})
    return domain


EPISODE_ENTRY_POINT = "pivot_envs.episodes.env:EpisodeEnv"
GENERIC_EPISODE_ENV_ID = "pivot/Episode-v0"
"""The episode env of any world: ``gymnasium.make(GENERIC_EPISODE_ENV_ID, world=SPEC, tasks=...)``."""

if GENERIC_EPISODE_ENV_ID not in gymnasium.registry:
    gymnasium.register(id=GENERIC_EPISODE_ENV_ID, entry_point=EPISODE_ENTRY_POINT)


def get_domain(name: str) -> Domain:
    """The registered domain ``name`` (plugins are loaded on first use)."""
    load_plugins()
    try:
        return _DOMAINS[name]
    except KeyError:
        broken = [m for m in _PLUGIN_ERRORS if f"domain plugin {name!r}" in m]
        if broken:
            raise ValueError(f"domain {name!r} is an installed plugin that did not load: {broken[0]}") from None
        raise ValueError(f"unknown domain {name!r}; known: {', '.join(domain_names())}{_broken_note()}") from None


def _broken_note() -> str:
    """``; plugins that did not load: ...`` when a domain or world plugin failed to load, else ``""``: an
    unknown name may be one of them."""
    errors = _PLUGIN_ERRORS + world_plugin_errors()
    return f"; plugins that did not load: {' | '.join(errors)}" if errors else ""


def broken_plugins_note() -> str:
    """What :func:`get_domain`'s error adds for plugins that did not load (``""`` when every plugin loaded)."""
    load_plugins()
    return _broken_note()


def find_domain(name: str) -> Domain | None:
    """The registered domain ``name``, or ``None`` (plugins are loaded on first use)."""
    load_plugins()
    return _DOMAINS.get(name)


def domain_names() -> list[str]:
    load_plugins()
    return sorted(_DOMAINS)


def all_domains() -> list[Domain]:
    return [_DOMAINS[n] for n in domain_names()]


def load_plugins() -> None:
    """Register the domains published by installed packages (entry-point group ``pivot_envs.domains``)."""
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED.append(True)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            domain = obj() if callable(obj) and not isinstance(obj, Domain) else obj
            if domain.name not in _DOMAINS:
                register_domain(domain)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the library
            message = f"pivot_envs: could not load domain plugin {ep.name!r} ({ep.value}): {exc}"
            _PLUGIN_ERRORS.append(message)
            warnings.warn(message, stacklevel=2)


def world_keys_of(name: str) -> tuple[str, ...]:
    """The ``world_keys`` of the registered domain ``name`` (``ValueError`` naming the known ones when unknown)."""
    return tuple(get_domain(name).world_keys)


use_world_keys_of(world_keys_of)  # WorldTask.from_trajectory(traj, DOMAIN) reads a domain's keys through it


def plugin_errors() -> list[str]:
    """The messages of domain plugins that could not be loaded (``pivot-envs list`` shows them)."""
    load_plugins()
    return list(_PLUGIN_ERRORS)
