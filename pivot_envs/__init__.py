"""pivot-envs: turn-level agentic RL environments built from expert trajectories."""

from pivot_envs.actions import parse_action
from pivot_envs.types import Action, Fixture, Message, Pivot, Profile, Trajectory, VerifyResult

__version__ = "0.1.0"

__all__ = [
    "Action",
    "Fixture",
    "Message",
    "Pivot",
    "Profile",
    "Trajectory",
    "VerifyResult",
    "parse_action",
]
