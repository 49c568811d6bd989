"""Plain-text rendering of pivots for humans (``pivot-envs env show``, ``env.render()``)."""

from __future__ import annotations

import json
from typing import Any

from pivot_envs.types import Message, Pivot


def render_message(message: Message, max_chars: int = 600) -> str:
    role = message.get("role", "?")
    lines = []
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", p)) if isinstance(p, dict) else str(p) for p in content)
    if content:
        text = str(content)
        if len(text) > max_chars:
            text = text[:max_chars] + f" ... [{len(text) - max_chars} more chars]"
        lines.append(text)
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        lines.append(f"-> {fn.get('name')}({_args(fn.get('arguments'))})")
    head = f"[{role}]" + (f" ({message['name']})" if message.get("name") else "")
    return head + " " + ("\n    ".join(lines) if lines else "")


def _args(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            return json.dumps(json.loads(arguments), ensure_ascii=False)
        except json.JSONDecodeError:
            return arguments
    return json.dumps(arguments, ensure_ascii=False)


def render_pivot(pivot: Pivot, max_chars: int = 600, last: int | None = None) -> str:
    """The pivot's context (optionally only the ``last`` messages), tools and expert action."""
    context = pivot.context if last is None else pivot.context[-last:]
    out = [f"pivot {pivot.id}  domain={pivot.domain}  turn={pivot.meta.get('turn')}  "
           f"trajectory={pivot.meta.get('trajectory_id')}"]
    if last is not None and len(pivot.context) > last:
        out.append(f"... {len(pivot.context) - last} earlier messages")
    out.extend(render_message(m, max_chars) for m in context)
    tool_names = [t.get("function", t).get("name") for t in pivot.tools]
    out.append(f"tools: {', '.join(str(n) for n in tool_names) or '(none)'}")
    if pivot.fixture is not None:
        out.append(f"fixture: {len(pivot.fixture.files)} files at {pivot.fixture.workdir}"
                   + (f", setup of {len(pivot.fixture.setup.splitlines())} lines" if pivot.fixture.setup else ""))
    out.append("EXPERT " + render_message(pivot.expert, max_chars))
    if pivot.profile is not None:
        out.append(f"profile: k={pivot.profile.k} mean={pivot.profile.mean:.3f} var={pivot.profile.var:.3f}")
    return "\n".join(out)
