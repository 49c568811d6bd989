"""A domain owns its default verifier: the built-ins are recipes on their Domain, and a user's Domain sets its own."""

import gymnasium
import pytest

from pivot_envs import Domain, Pivot, get_domain, parse_action, register_domain
from pivot_envs.builtin_domains import builtin_domains
from pivot_envs.domains import _DOMAINS
from pivot_envs.envs_data.terminal.domain import terminal_verifier
from pivot_envs.verifiers import build_verifier
from pivot_envs.verifiers.defaults import default_verifier_spec

JUDGE = {"model": "m", "base_url": "http://127.0.0.1:9/v1"}


@pytest.fixture
def user_domain():
    """Registers a domain under a fresh name; takes it out of the registries afterwards."""
    added = []

    def add(**fields):
        domain = register_domain(Domain(name=f"user_dv_{len(added)}", env_id=f"pivot/UserDv{len(added)}-v0", **fields))
        added.append(domain)
        return domain

    yield add
    for domain in added:
        _DOMAINS.pop(domain.name, None)
        gymnasium.registry.pop(domain.env_id, None)


def test_each_builtin_domain_defines_its_default_verifier_on_itself():
    for domain in builtin_domains():
        assert callable(domain.default_verifier), domain.name
        assert default_verifier_spec(domain.name) == domain.default_verifier()
        assert default_verifier_spec(domain.name, judge=JUDGE) == domain.default_verifier(judge=JUDGE)
    assert get_domain("terminal").default_verifier is terminal_verifier


def test_default_verifier_spec_asks_a_users_domain_for_its_recipe(user_domain):
    seen = []

    def recipe(judge=None):
        seen.append(judge)
        stages = [{"role": "accept", "verifier": "strict"}]
        if judge is not None:
            stages.append({"role": "decide", "verifier": {"name": "judge", **judge}})
        return {"name": "cascade", "stages": stages}

    domain = user_domain(default_verifier=recipe)
    assert default_verifier_spec(domain.name) == {"name": "cascade",
                                                  "stages": [{"role": "accept", "verifier": "strict"}]}
    with_judge = default_verifier_spec(domain.name, judge=JUDGE)
    assert with_judge["stages"][-1] == {"role": "decide", "verifier": {"name": "judge", **JUDGE}}
    assert seen == [None, JUDGE]


def test_a_users_fixed_spec_is_used_as_it_is_and_never_shared(user_domain):
    domain = user_domain(default_verifier={"name": "fuzzy", "threshold": 90})
    spec = default_verifier_spec(domain.name, judge=JUDGE)  # a fixed spec has no place for a judge
    assert spec == {"name": "fuzzy", "threshold": 90}
    spec["threshold"] = 10
    assert domain.verifier_spec() == {"name": "fuzzy", "threshold": 90}
    named = user_domain(default_verifier="strict")
    assert default_verifier_spec(named.name) == {"name": "strict"}
    verifier = build_verifier(default_verifier_spec(named.name))
    expert = {"role": "assistant", "content": "salt"}
    assert verifier.verify(parse_action("salt"), Pivot(id="p", domain=named.name, context=[], expert=expert)).passed


def test_an_unknown_domain_still_gets_tool_call():
    assert default_verifier_spec("no_such_domain_here") == {"name": "tool_call"}


def test_a_users_zero_argument_recipe_is_called_without_the_judge(user_domain):
    domain = user_domain(default_verifier=lambda: {"name": "fuzzy", "threshold": 80})
    assert default_verifier_spec(domain.name, judge=JUDGE) == {"name": "fuzzy", "threshold": 80}
    assert default_verifier_spec(domain.name) == {"name": "fuzzy", "threshold": 80}
