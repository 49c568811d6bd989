"""Readers and writers of trajectory and pivot formats.

Trajectories (-> :class:`~pivot_envs.types.Trajectory`)::

    trajs = read_trajectories("runs.jsonl")                 # fmt="auto"
    trajs = read_trajectories("airline.jsonl", "tau_bench", skip_bad=True, report=report)
    trajs = read_trajectories("swe_runs/")                  # a folder of SWE-agent .traj files
    trajs = read_trajectories("harbor_job/")                # a folder of ATIF .json documents
    write_trajectories(trajs, "out.jsonl.gz")               # OpenAI chat JSONL
    write_trajectories(trajs, "out.atif.jsonl", fmt="atif") # one ATIF document per line

Pivots (-> :class:`~pivot_envs.types.Pivot`)::

    pivots = read_pivots("pivots.jsonl")                    # ours, or NeMo Gym rows (auto)
    write_pivots(pivots, "gym.jsonl", fmt="nemo_gym", agent_ref="my_agent")
    write_pivots(pivots, "pivots.atif.jsonl", fmt="atif")   # context + expert step, one ATIF document a line

Formats: ``openai`` (:mod:`.openai_chat`), ``tau_bench`` (:mod:`.tau_bench`),
``swe_agent`` (:mod:`.swe_agent`), ``tau2_tasks`` (:mod:`.tau2_tasks`: tau2-bench airline
tasks, their expected actions run on the MCP server), ``atif`` (:mod:`.atif`: Harbor's Agent
Trajectory Interchange Format, read and written), ``pivots`` (:mod:`.pivots`), ``nemo_gym``
(:mod:`.nemo_gym`); auto-detection in :mod:`.detect`. Every reader validates
rows and raises :class:`~pivot_envs.jsonl.BadRowError` naming the file, line
and field (``data.jsonl:17: field 'messages[3].tool_calls[0].function.arguments': ...``);
with ``skip_bad=True`` bad rows are skipped and counted by reason in ``report``.
Files ending in ``.gz`` are read and written compressed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from pivot_envs.formats.atif import atif_from_pivot, atif_from_trajectory, read_atif, trajectories_from_atif, write_atif
from pivot_envs.formats.detect import PIVOT_FORMATS, TRAJECTORY_FORMATS, classify_keys, detect_format
from pivot_envs.formats.nemo_gym import pivot_from_row, read_nemo_gym, row_from_pivot, write_nemo_gym
from pivot_envs.formats.openai_chat import read_openai, trajectory_from_row, write_openai
from pivot_envs.formats.pivots import pivot_from_dict, read_pivot_jsonl, write_pivot_jsonl
from pivot_envs.formats.swe_agent import read_swe_agent, swe_agent_history, trajectory_from_swe
from pivot_envs.formats.tau2_tasks import read_tau2_tasks
from pivot_envs.formats.tau_bench import read_tau_bench, trajectory_from_tau_row
from pivot_envs.formats.validate import RowError
from pivot_envs.jsonl import ReadReport
from pivot_envs.types import Pivot, Trajectory

__all__ = [
    "PIVOT_FORMATS",
    "TRAJECTORY_FORMATS",
    "PIVOT_OUTPUT_FORMATS",
    "RowError",
    "atif_from_pivot",
    "atif_from_trajectory",
    "classify_keys",
    "detect_format",
    "pivot_from_dict",
    "pivot_from_row",
    "read_nemo_gym",
    "read_openai",
    "read_pivot_jsonl",
    "read_atif",
    "read_pivots",
    "read_swe_agent",
    "read_tau2_tasks",
    "read_tau_bench",
    "read_trajectories",
    "row_from_pivot",
    "swe_agent_history",
    "trajectory_from_row",
    "trajectories_from_atif",
    "trajectory_from_swe",
    "trajectory_from_tau_row",
    "write_atif",
    "write_nemo_gym",
    "write_openai",
    "write_pivot_jsonl",
    "write_pivots",
    "write_trajectories",
]

_TRAJECTORY_READERS = {"openai": read_openai, "tau_bench": read_tau_bench, "swe_agent": read_swe_agent,
                       "tau2_tasks": read_tau2_tasks, "atif": read_atif}
PIVOT_OUTPUT_FORMATS = ("pivots", "nemo_gym", "atif")
"""What :func:`write_pivots` writes (``atif``: one ATIF document per pivot, not read back as pivots)."""


def read_trajectories(path: str | Path, fmt: str = "auto", *, skip_bad: bool = False,
                      report: ReadReport | None = None) -> list[Trajectory]:
    """Read trajectories from ``path`` in format ``fmt`` (``auto``, ``openai``, ``tau_bench``, ``swe_agent``,
    ``atif``, ``tau2_tasks``: this one starts the tau2 airline MCP server to run the tasks' expected actions).

    ``report`` (a :class:`ReadReport`) receives the number of rows read and the
    skipped ones by reason; without ``skip_bad`` the first bad row raises
    :class:`~pivot_envs.jsonl.BadRowError`.
    """
    fmt = detect_format(path) if fmt == "auto" else fmt
    if fmt in PIVOT_FORMATS:
        raise ValueError(f"{path}: holds pivots ({fmt}), not trajectories: read it with read_pivots() "
                         "(CLI: use it directly as an env's pivot file)")
    reader = _TRAJECTORY_READERS.get(fmt)
    if reader is None:
        raise ValueError(f"unknown trajectory format {fmt!r}: use auto, {', '.join(TRAJECTORY_FORMATS)}")
    return reader(path, skip_bad=skip_bad, report=report)


def write_trajectories(trajectories: Iterable[Trajectory], path: str | Path, fmt: str = "openai") -> int:
    """Write trajectories as OpenAI chat JSONL (``openai``, lossless through :meth:`Trajectory.to_dict`) or
    ATIF documents, one a line (``atif``); returns the count."""
    if fmt == "openai":
        return write_openai(trajectories, path)
    if fmt == "atif":
        return write_atif(trajectories, path)
    raise ValueError(f"unknown trajectory output format {fmt!r}: use openai or atif")


def read_pivots(path: str | Path, fmt: str = "auto", *, skip_bad: bool = False, report: ReadReport | None = None,
                domain: str | None = None) -> list[Pivot]:
    """Read pivots in format ``fmt`` (``auto``, ``pivots`` = ours, ``nemo_gym``).

    ``domain`` sets the domain of NeMo Gym rows that carry none (default ``tool_use``).
    """
    if Path(path).is_dir():
        raise ValueError(f"{path}: is a folder, not a pivot file: give a pivot JSONL file (ours or NeMo Gym rows)")
    fmt = detect_format(path) if fmt == "auto" else fmt
    if fmt == "pivots":
        return read_pivot_jsonl(path, skip_bad=skip_bad, report=report)
    if fmt == "nemo_gym":
        return read_nemo_gym(path, skip_bad=skip_bad, report=report, domain=domain)
    if fmt in TRAJECTORY_FORMATS:
        raise ValueError(f"{path}: holds trajectories ({fmt}), not pivots: cut them into pivots first "
                         "(`pivot-envs extract` or pivot_envs.pipeline.extract.extract_pivots)")
    raise ValueError(f"unknown pivot format {fmt!r}: use auto, {', '.join(PIVOT_FORMATS)}")


def write_pivots(pivots: Iterable[Pivot], path: str | Path, fmt: str = "pivots", **options: Any) -> int:
    """Write pivots as ``pivots`` (ours, one ``Pivot.to_dict()`` a line), ``nemo_gym`` rows or ``atif``
    documents (the context then the expert's step, one document a line); returns the count.

    ``options`` go to :func:`~pivot_envs.formats.nemo_gym.write_nemo_gym` (``agent_ref``, ``content_parts``).
    """
    if fmt in ("pivots", "atif") and options:
        raise ValueError(f"options {sorted(options)} apply to fmt='nemo_gym' only")
    if fmt == "pivots":
        return write_pivot_jsonl(pivots, path)
    if fmt == "nemo_gym":
        return write_nemo_gym(pivots, path, **options)
    if fmt == "atif":
        return write_atif(pivots, path)
    raise ValueError(f"unknown pivot format {fmt!r}: use {', '.join(PIVOT_OUTPUT_FORMATS)}")
