"""Stops: a text where the expert made a call, judged against where the task stands in the world.

A stop ends the agent's work. It is right only where the work is done (the world already holds the expert's
final state, or the tools have returned every fact the expert's final answer reports) and nothing the user asked
to be told is still to be found, and only when it is an answer: a message that reads as the end of the work.

Wrong, at pivots where the world already holds the task's final state (where a rule that reads the state alone
would accept any text):

* ``gibberish_stop``: ``asdf qwerty zxcv``;
* ``failure_stop``: a claim that the task failed, where it succeeded;
* ``command_as_text``: the expert's command pasted as plain text (shell tools), and ``command_in_fence`` the same
  in a ```bash fence;
* ``precall_prose``: the expert's own words before its call (``Verifying.``), with the call dropped;

and where work or values are left:

* ``early_done``: ``Done.`` where the files are done but the values the expert's final answer reports come from
  a later call (``read back the VERSION``: the user asked for them);
* ``early_answer``: the expert's final answer before its facts were found (a guess) or its work done.

Right: ``stop_done`` (the expert's final answer where the stop is ready) and ``confirmation_stop`` (``Done.`` and a
longer confirmation where the task changed the world, is done, and the expert's answer reports no fact).

Only tasks that end with an answer have stops: where a task ends with a finish tool (SWE's ``submit``), that call
is the stop, and no family here builds a case.
"""

from __future__ import annotations

from typing import Iterable

from pivot_envs.redteam.case import RIGHT, WRONG, Made, family
from pivot_envs.redteam.site import Site, text
from pivot_envs.stop_language import FAILURE as FAILURE_CLAIM

GIBBERISH = "asdf qwerty zxcv"
FAILURE = "Something went wrong and the task could not be completed."
CONFIRMATIONS = ("Done.", "All done: everything you asked for is in place.")


def _state_done(site: Site) -> bool:
    """A state task already done, in a domain whose tasks end with an answer (where they end with a finish tool,
    ``submit``, that tool is the stop)."""
    where = site.where
    return where is not None and where.final is not None and where.changes_state and where.done


def _final(site: Site) -> str:
    """The task's final answer (``""`` without one)."""
    return (site.where.final or "") if site.where is not None else ""


@family("gibberish_stop", WRONG, "call", "nonsense as a stop where the world holds the final state")
def _gibberish(site: Site) -> Iterable[Made]:
    if _state_done(site):
        yield WRONG, text(GIBBERISH), GIBBERISH


@family("failure_stop", WRONG, "call", "a claim of failure as a stop where the task succeeded")
def _failure(site: Site) -> Iterable[Made]:
    if _state_done(site) and not FAILURE_CLAIM.search(_final(site)):
        yield WRONG, text(FAILURE), FAILURE


@family("command_as_text", WRONG, "call", "the expert's command pasted as text, where the task is done", needs="shell")
def _command_as_text(site: Site) -> Iterable[Made]:
    command = site.shell_command()
    if command and _state_done(site):
        yield WRONG, text(command), command[:60]


@family("command_in_fence", WRONG, "call", "the expert's command in a bash fence, where the task is done", needs="shell")
def _command_in_fence(site: Site) -> Iterable[Made]:
    command = site.shell_command()
    if command and _state_done(site):
        yield WRONG, text(f"```bash\n{command}\n```"), command[:60]


@family("precall_prose", WRONG, "call", "the expert's words before its call, the call dropped, where the task is done")
def _precall_prose(site: Site) -> Iterable[Made]:
    prose = site.expert_text
    if prose and _state_done(site) and prose != _final(site).strip():
        yield WRONG, text(prose), prose[:60]


@family("early_done", WRONG, "call", "'Done.' where the files are done but the values the user asked for are not known")
def _early_done(site: Site) -> Iterable[Made]:
    where = site.where
    if where is not None and where.changes_state and where.done and where.pending:
        yield WRONG, text("Done."), f"{len(where.pending)} facts pending"


@family("early_answer", WRONG, "call", "the expert's final answer before its work was done or its facts found")
def _early_answer(site: Site) -> Iterable[Made]:
    where = site.where
    if where is not None and where.final and not where.ready:
        yield WRONG, text(where.final), "not ready"


@family("stop_done", RIGHT, "call", "the expert's final answer where the stop is ready")
def _stop_done(site: Site) -> Iterable[Made]:
    where = site.where
    if where is not None and where.final and where.ready:
        yield RIGHT, text(where.final), "ready"


@family("confirmation_stop", RIGHT, "call", "a confirmation where a state task is done and its answer is bare")
def _confirmation(site: Site) -> Iterable[Made]:
    where = site.where
    if where is not None and _state_done(site) and where.bare and not where.pending:  # _state_done: a final answer
        for words in CONFIRMATIONS:
            yield RIGHT, text(words), words
