"""pivot-envs: turn-level agentic RL environments built from expert trajectories."""

from pathlib import Path as _Path

_SOURCE_ROOT = _Path(__file__).resolve().parent.parent
if (_SOURCE_ROOT / "pyproject.toml").is_file() and (_SOURCE_ROOT / "verifiers" / "base.py").is_file():
    # Imported from the source tree (Python started in the repository root, where this folder shadows an
    # installed copy): the sub-packages that live in top-level folders (verifiers/, agents/, trainers/, ...;
    # pyproject's package-dir) are found there. An installed package has no pyproject.toml beside it.
    __path__.append(str(_SOURCE_ROOT))

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
