"""How long the work behind a demo report took, from two clocks that should agree.

The stage clock (``timings.json``) times each stage of the pipeline; each run's parts time themselves
(``runs/<run>/parts/seconds.json``, summed into the report's ``timings.runs_s``). The runs happen inside the select
and arms stages, so their clocks fit in those stages' time (shared by the workers). Where they clearly do not,
the stage clock missed calls (a demo resumed over calls made before it was kept), and the other stages plus the
runs are the better, lower-bound figure.
"""

from __future__ import annotations

from typing import Any

RUN_STAGES = ("select", "arms")
"""The stages whose work the runs' parts do."""


def _stage_and_runs_seconds(r: dict[str, Any]) -> tuple[float, float, float] | None:
    """(select + arms stages, the runs' own clocks, the other stages) in seconds; None without ``runs_s``."""
    runs_s = (r.get("timings") or {}).get("runs_s")
    if runs_s is None:
        return None
    stages = sum(float(r["stage_seconds"].get(k, 0.0)) for k in RUN_STAGES)
    other = sum(float(v) for k, v in r["stage_seconds"].items() if k not in RUN_STAGES)
    return stages, float(runs_s), other


def clock_missed_work(r: dict[str, Any]) -> bool:
    """Whether the runs' own clocks hold clearly more than the select and arms stages could (a resumed demo whose
    earlier calls ran before the stage clock was kept). With W workers, W runs share the wall time."""
    figures = _stage_and_runs_seconds(r)
    return figures is not None and figures[1] / _workers(r) > figures[0] * 1.05 + 60


def least_wall_seconds(r: dict[str, Any]) -> float:
    """The wall time of the work behind a report: the stage clock's, or where it missed earlier calls, the other
    stages plus the runs' own clocks (shared by the workers)."""
    if not clock_missed_work(r):
        return float(r["wall_seconds"])
    stages, runs_s, other = _stage_and_runs_seconds(r)  # type: ignore[misc]
    return other + runs_s / _workers(r)


def _workers(r: dict[str, Any]) -> int:
    return max(1, int((r.get("settings") or {}).get("workers") or 1))


def runs_seconds_lines(r: dict[str, Any]) -> list[str]:
    """The runs' own clocks beside the select and arms stages' (the better figure when the stage clock missed
    calls)."""
    figures = _stage_and_runs_seconds(r)
    if figures is None:
        return []
    stages, runs_s, _ = figures
    line = (f"The selection's and the arms' runs took {runs_s:.0f} s by their parts' own clocks (select + arms "
            f"stages: {stages:.0f} s).")
    if clock_missed_work(r):
        line += (f" The stage clock missed work done by earlier calls, so the work behind this report took at least "
                 f"{least_wall_seconds(r) / 60:.1f} min (the other stages + the runs"
                 + (f" over {_workers(r)} workers" if _workers(r) > 1 else "") + ").")
    return ["", line]
