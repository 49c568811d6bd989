"""Red-teaming a domain's verifier: attack families built by rule, labelled by the domain's world.

A reward that a policy can game is worse than a strict one: RL finds the hole and trains the hack. This package
builds, at every pivot of a domain, the wrong actions a policy finds (the expert's call followed by
``rm -rf ./*``, gibberish as a stop, an answer padded with a retraction, a search for one word of the query, an
edit of any content, ...) and the right ones it must keep crediting (other spellings of the same command, the
expert's answer reworded), labels each one by rule and by replaying it in the domain's world (never with the
verifier's own comparisons), scores them with a verifier and reports the accepted share per family::

    from pivot_envs.redteam import red_team
    report = red_team("terminal", limit=40)          # the domain's default verifier
    print(report.table())

    pivot-envs redteam terminal --limit 40 -o out/    # the same from the command line, any registered domain

The families are in :mod:`~pivot_envs.redteam.families` (one module per kind of action); the world-side labels
in :mod:`~pivot_envs.redteam.oracle`; building and scoring in :mod:`~pivot_envs.redteam.run`.
"""

from pivot_envs.redteam.case import Case, Family, FAMILIES
from pivot_envs.redteam.families import family_names
from pivot_envs.redteam.run import RedTeamReport, build_cases, red_team, score_cases

__all__ = ["Case", "FAMILIES", "Family", "RedTeamReport", "build_cases", "family_names", "red_team", "score_cases"]
