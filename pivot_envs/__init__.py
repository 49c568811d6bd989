"""pivot-envs: turn-level agentic RL environments built from expert trajectories."""

from pivot_envs.actions import parse_action
from pivot_envs.types import Action, Fixture, Message, Pivot, Profile, Trajectory, VerifyResult
from pivot_envs.domains import Domain, get_domain, load_plugins, register_domain
from pivot_envs.builtin_domains import register_builtin_domains

register_builtin_domains()
load_plugins()  # third-party domains (entry-point group "pivot_envs.domains") get their env ids too

__version__ = "0.2.0"

__all__ = [
    "Action",
    "Domain",
    "get_domain",
    "register_domain",
    "Fixture",
    "Message",
    "Pivot",
    "Profile",
    "Trajectory",
    "VerifyResult",
    "parse_action",
]
