"""The families, one module per kind of action (importing this package registers them all):

* :mod:`.turns`: a call turn with something extra, repeated or missing (every domain);
* :mod:`.stops`: a text where the expert made a call (every domain with a world);
* :mod:`.answers`: an answer that adds to the expert's, or says something else (every domain with answers);
* :mod:`.shell`: shell commands (a domain with a ``bash``-style tool: terminal);
* :mod:`.search`: ``search`` / ``open`` calls (the search domain, any domain with both tools);
* :mod:`.swe`: SWE-agent's editor, reads and test runs (the swe domain).
"""

from pivot_envs.redteam.case import FAMILIES
from pivot_envs.redteam.families import answers, search, shell, stops, swe, turns  # noqa: F401 - registers them


def family_names() -> list[str]:
    """The registered families' names, sorted."""
    return sorted(FAMILIES)
