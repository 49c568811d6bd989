"""``EvalReport``: the typed top of the report :func:`~pivot_envs.trainers.evaluate.evaluate` returns.

The report stays a plain dict (it is the ``pivot-envs eval -o`` JSON file and the return value users
index); :meth:`EvalReport.from_dict` reads its top-level keys once, so a reader such as the CLI's
table names its fields instead of indexing nested dicts by string::

    report = EvalReport.from_dict(evaluate("out/sft", "bundled:tool_use:test", k=4))
    report.k, report.seed, report.columns()      # [("tool_use", {...summary...}), ...]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["EvalReport"]


@dataclass(frozen=True)
class EvalReport:
    """The top level of an evaluation report.

    Attributes:
        model: the model evaluated (a folder or hub id).
        settings: the generation settings (``k``, ``temperature``, ``seed``, ...) and the episode settings.
        domains: per domain, its summary (``pivots``, ``greedy``, ``sampled``, optionally ``episodes``).
        overall: the same summary over every pivot.
        probes: the OOD probes' accuracy (``n``, ``accuracy``, ``by_kind``), or ``None``.
        seconds: wall time of the evaluation.
    """

    model: str
    settings: dict[str, Any]
    domains: dict[str, dict[str, Any]]
    overall: dict[str, Any]
    probes: dict[str, Any] | None = None
    seconds: float = 0.0

    @classmethod
    def from_dict(cls, report: dict[str, Any]) -> "EvalReport":
        return cls(model=str(report["model"]), settings=dict(report["settings"]), domains=dict(report["domains"]),
                   overall=dict(report["overall"]), probes=report.get("probes"),
                   seconds=float(report.get("seconds") or 0.0))

    @property
    def k(self) -> int:
        """Samples per pivot of the mean@k measures."""
        return int(self.settings["k"])

    @property
    def temperature(self) -> float:
        return float(self.settings["temperature"])

    @property
    def seed(self) -> int:
        return int(self.settings["seed"])

    @property
    def has_sampled(self) -> bool:
        """Whether mean@k samples were drawn (``k >= 1`` at a temperature above 0)."""
        return self.overall.get("sampled") is not None

    @property
    def has_episodes(self) -> bool:
        """Whether whole tasks were played (``episodes=...``)."""
        return self.overall.get("episodes") is not None

    def columns(self) -> list[tuple[str, dict[str, Any]]]:
        """``(name, summary)`` per domain, plus ``("all", overall)`` when there are several domains."""
        columns = list(self.domains.items())
        if len(columns) > 1:
            columns.append(("all", self.overall))
        return columns
