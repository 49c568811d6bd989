"""Training metrics: a JSONL row every step, optional TensorBoard / W&B, PNG plots at the end.

``metrics.jsonl`` holds one JSON object per step (written and flushed as the
step ends, so a crashed run keeps what it did). Values that are undefined at a
step (e.g. ``kl`` without a reference model, ``loss`` when no group carried a
signal) are ``null``, never NaN. :func:`plot_metrics` draws reward, KL and the
zero-variance fraction against the step with matplotlib (imported only there).

Keys of a row (every value summed or averaged over all processes)::

    step, epoch, active_pivots        steps done; epochs of D_pivot begun; pivots in the sampling pool
    reward_mean, reward_std           functional reward of the step's FIRST sampling round (scored samples;
                                      unbiased by resampling and expert injection)
    strict_reward_mean, miss_rate     strict-match reward; P[strict = 0 | functional pass]
    zero_var_frac                     groups whose scored rewards are all equal / groups with a scored sample
    masked                            samples whose verifier errored (never scored), all rounds
    groups, unscored_groups           pivots sampled; of them, groups with no scored sample at all
    resampled_groups, injected        groups sampled again; groups that got the expert action
    skipped_groups, used_groups, used_samples   what entered the loss
    completion_len_mean               tokens per sampled action (first round)
    loss, kl, clip_fraction,          the loss of the batch (mean over num_iterations); k3 KL to the reference
    ratio_mean, entropy               (null when beta = 0); token fractions / means; policy entropy per token
    grad_norm, lr, updated            norm before clipping; learning rate of the step's update; whether one ran
    pvpo_refreshed                    pivots whose V(s) was re-estimated at this step (pvpo only)
    sample_s, score_s, update_s,      wall seconds of the phases (on rank 0) and of the step;
    step_s, tokens_per_s              sampled completion tokens (all processes) per second of the step
    sample_tokens_per_s               sampled completion tokens per second of sampling (generation throughput)
    train_tokens, train_tokens_per_s  tokens (prompt + completion, no padding) through the policy's forward and
                                      backward passes of the update (all iterations), and their rate over update_s
                                      (which also holds the pi_old / reference forwards: a lower bound)
    world_size, sharding              processes of the run; none (DDP, or one process) or fsdp (trainers.sharding)
    params_total, params_local        the policy's parameters; those rank 0 holds (about 1/world_size under fsdp)
    hack/accepted                     the hack monitor (:mod:`pivot_envs.verifiers.hack_monitor`): accepted samples
                                      (passed, no verifier error) of the first sampling round (PivotRL) or judged
                                      turns (episodes: turns on the expert's path, only with turn_credit > 0)
    hack/more_calls, hack/stop_at_call, hack/long_answer   shares of them with more tool calls than the expert, no
                                      call where the expert made one, a text answer > 3x the expert's in characters
    accepted_by/<category>            shares of them per category of what accepted them (exact, arguments,
                                      similarity, effect, state, facts, judge, tool_name, other); every share is
                                      null when nothing was accepted

Rows of the episode trainer with an external harness (``harness:``, :mod:`pivot_envs.harness.source`,
:func:`pivot_envs.trainers.harness_steps.harness_fields`) add::

    harness                           the harness command (or callable) that played the step's episodes
    retokenized_calls                 captured calls whose prompt did not extend the previous prompt + completion
    window_cut_calls                  captured calls whose prompt the policy's window cut (never counted as retokenized)
    capture_overhead_ms               the endpoint's own time per call (latency - sampling - queue wait)
    harness_runs, harness_failures    runs; runs whose harness failed (a non-zero exit, killed, could not start)
    harness_failure_rate              harness_failures / harness_runs (past max_harness_failure_rate the run stops)
    harness_abandoned                 runs killed or timed out (errors: no reward)
    harness_error, harness_stderr_tail    the step's first failed run: its error and the end of its stderr
    uncaptured_tool_calls             tool calls the harness made that no model call asked for
    unexecuted_tool_calls             tool calls the model asked for that the harness never ran
    user_messages                     messages sent to the task's user through the user tool
    cut_at_turn_limit                 runs the endpoint ended at their turn limit
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

log = logging.getLogger("pivot_envs.trainers")

TIMING_KEYS = ("sample_s", "score_s", "update_s", "step_s", "tokens_per_s", "weight_sync_s", "sample_share",
               "sample_tokens_per_s", "train_tokens_per_s", "capture_overhead_ms")
"""Keys that measure wall time (they differ between two runs that are otherwise identical)."""


def clean(value: Any) -> Any:
    """JSON-safe value: NaN/inf -> None, numpy/torch scalars -> float."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else None


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl`` file (a torn last line is ignored)."""
    rows: list[dict[str, Any]] = []
    p = Path(path)
    if not p.exists():
        return rows
    for line in p.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break  # the run was killed while writing this line
    return rows


def truncate_metrics(path: str | Path, last_step: int) -> None:
    """Keep the rows with ``step <= last_step`` (a resumed run rewrites the steps after its checkpoint)."""
    p = Path(path)
    kept = []
    for line in p.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            break  # a torn last line
        if int(row.get("step", -1)) <= last_step:
            kept.append(line + "\n")  # verbatim: the kept rows stay byte-identical
    p.write_text("".join(kept), encoding="utf-8")


class MetricsLogger:
    """Appends rows to ``metrics.jsonl`` and mirrors them to TensorBoard / W&B.

    Args:
        path: the JSONL file (appended to; a fresh run truncates it first with ``fresh=True``).
        report_to: ``"tensorboard"`` and/or ``"wandb"``.
        run_dir: where TensorBoard event files go (``run_dir/tensorboard``).
        config: the run config (sent to W&B).
        enabled: False on non-zero ranks (nothing is written).
        fresh: start the file empty.
        wandb_project: W&B project name.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        report_to: Iterable[str] = (),
        run_dir: str | Path | None = None,
        config: dict[str, Any] | None = None,
        enabled: bool = True,
        fresh: bool = True,
        wandb_project: str = "pivot-envs",
    ):
        self.path = Path(path)
        self.enabled = enabled
        self._tb = None
        self._wandb = None
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fresh:
            self.path.write_text("", encoding="utf-8")
        self._file = self.path.open("a", encoding="utf-8")
        sinks = list(report_to)
        if "tensorboard" in sinks:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise ImportError("report_to has 'tensorboard' but the tensorboard package is missing: "
                                  "pip install tensorboard, or drop it from report_to") from exc
            self._tb = SummaryWriter(str(Path(run_dir or self.path.parent) / "tensorboard"))
        if "wandb" in sinks:
            try:
                import wandb
            except ImportError as exc:
                raise ImportError("report_to has 'wandb' but wandb is not installed: pip install wandb, "
                                  "or drop it from report_to") from exc
            self._wandb = wandb.init(project=wandb_project, config=config or {}, dir=str(run_dir or self.path.parent))

    def log(self, row: dict[str, Any]) -> None:
        """Write one step's row (flushed at once) and mirror its numbers."""
        if not self.enabled:
            return
        row = clean(row)
        self._file.write(json.dumps(row, allow_nan=False) + "\n")
        self._file.flush()
        step = int(row.get("step", 0))
        numbers = {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"}
        if self._tb is not None:
            for key, value in numbers.items():
                self._tb.add_scalar(f"train/{key}", value, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(numbers, step=step)

    def close(self) -> None:
        if not self.enabled:
            return
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


@dataclass(frozen=True)
class StepReport:
    """What a progress display shows of one step's row, read by name from the keys every trainer writes:
    ``reward_mean`` (PivotRL: verifier reward; episodes: task success), ``kl`` and ``loss``. ``None`` where
    the step has no such value (SFT has no reward, ``kl`` needs ``beta > 0``, no update ran)."""

    step: int
    reward: float | None = None
    kl: float | None = None
    loss: float | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "StepReport":
        return cls(step=int(row.get("step", 0)), reward=_number(row.get("reward_mean")), kl=_number(row.get("kl")),
                   loss=_number(row.get("loss")))

    def text(self) -> str:
        """``reward 0.5  kl 0.01  loss 0.2`` (the values there are, 4 significant digits)."""
        parts = [(label, value) for label, value in (("reward", self.reward), ("kl", self.kl), ("loss", self.loss))]
        return "  ".join(f"{label} {value:.4g}" for label, value in parts if value is not None)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def format_row(row: dict[str, Any]) -> str:
    """A one-line summary of a step for the console."""

    def f(key: str, fmt: str = ".3f") -> str:
        value = row.get(key)
        return "-" if value is None else format(value, fmt)

    return (f"step {row.get('step')}: reward {f('reward_mean')} (std {f('reward_std')}) "
            f"zero-var {f('zero_var_frac', '.2f')} masked {row.get('masked', 0)} loss {f('loss', '.4f')} "
            f"kl {f('kl', '.4f')} clip {f('clip_fraction', '.3f')} lr {f('lr', '.2e')} "
            f"{f('tokens_per_s', '.0f')} tok/s {f('step_s', '.2f')}s")


PLOTTED = (("reward_mean", "reward (mean)"), ("kl", "KL(pi || pi_0), k3"), ("zero_var_frac", "zero-variance groups"))


def plot_metrics(path: str | Path, out: str | Path) -> Path | None:
    """Plot reward, KL and the zero-variance fraction against the step into ``out`` (PNG).

    Returns the PNG path, or ``None`` (with a warning) when matplotlib is not installed or there is
    nothing to plot.
    """
    rows = read_metrics(path)
    if not rows:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        warnings.warn("matplotlib is not installed: no metrics plot (pip install matplotlib)", stacklevel=2)
        return None
    fig, axes = plt.subplots(1, len(PLOTTED), figsize=(4.2 * len(PLOTTED), 3.2))
    for ax, (key, title) in zip(axes, PLOTTED):
        points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="." if len(xs) < 60 else None, linewidth=1.2)
        else:
            ax.text(0.5, 0.5, "not logged" + (" (beta = 0: no reference)" if key == "kl" else ""),
                    ha="center", va="center", transform=ax.transAxes, color="gray")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
