"""Task families of the terminal domain: fixtures, expert command plans and summaries.

A family is a function ``(rng, fail) -> TaskPlan`` registered with :func:`family`.
The plan holds the fixture, the user request(s) and the expert's commands (with
commands meant to be equivalent and near misses); ``finish`` reads the real
outputs and the final file tree and writes the expert's summary and whether the
task was really solved. With ``fail=True`` the expert makes a realistic mistake
(wrong file, wrong pattern, missing flag) and still reports success.

Nothing here runs commands: :mod:`pivot_envs.envs_data.terminal.generator` does.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Callable

from pivot_envs.types import Fixture

# --------------------------------------------------------------------------- plan types


@dataclass
class Step:
    """One expert ``bash`` call.

    Attributes:
        command: the shell command (relative paths only).
        label: name under which ``finish`` reads this step's output (default ``s<i>``).
        say: short assistant text sent with the call; ``None`` for a bare call.
        alternatives: commands meant to be equivalent at this state (same stdout, stderr,
            exit status and resulting files); the generator keeps only those that are.
        near_misses: ``(command, reason)`` pairs that look right but print differently or
            leave other files; the generator keeps only those that do differ.
        expect_rc: the exit status the plan expects (``None``: any); another one is a bug.
    """

    command: str
    label: str = ""
    say: str | None = None
    alternatives: list[str] = field(default_factory=list)
    near_misses: list[tuple[str, str]] = field(default_factory=list)
    expect_rc: int | None = 0


@dataclass
class Segment:
    """A user request and the expert steps answering it (one summary follows)."""

    user: str
    steps: list[Step]


@dataclass
class Snapshot:
    """The file tree at the end of an episode.

    Attributes:
        files: relative path -> bytes of every regular file.
        modes: relative path -> permission bits of every file and folder.
    """

    files: dict[str, bytes]
    modes: dict[str, int]

    def text(self, path: str) -> str | None:
        """The file's text, or None when it does not exist."""
        data = self.files.get(path)
        return None if data is None else data.decode("utf-8", errors="replace")


@dataclass
class Outcome:
    """What the expert's commands really did: outputs by step label and the final tree."""

    outputs: dict[str, str]
    codes: dict[str, int]
    final: Snapshot


@dataclass
class Finish:
    """The expert's closing texts (one per segment) and whether the task is really solved."""

    summaries: list[str]
    solved: bool


@dataclass
class TaskPlan:
    """One planned episode.

    Attributes:
        fixture: the state at the start of the episode.
        segments: user requests with the expert's steps.
        finish: builds the summaries from the real outcome and judges success.
        failure: what the expert gets wrong (``None`` for a correct episode).
    """

    fixture: Fixture
    segments: list[Segment]
    finish: Callable[[Outcome], Finish]
    failure: str | None = None


Builder = Callable[[random.Random, bool], TaskPlan]
FAMILIES: dict[str, Builder] = {}
"""Registry: family name -> builder ``(rng, fail) -> TaskPlan``."""


def family(name: str) -> Callable[[Builder], Builder]:
    """Register a task family under ``name``."""

    def deco(fn: Builder) -> Builder:
        FAMILIES[name] = fn
        return fn

    return deco


# --------------------------------------------------------------------------- helpers

SETUP_HEAD = "export LC_ALL=C\nchmod -R u=rwX,go=rX ."
"""Every setup starts here: C locale for the replayed commands, and fixed modes (folders 755,
files 644) whatever the umask of the process that wrote the files."""

LOOK = (
    "Let me look at the files first.",
    "First, a quick look at what is here.",
    "Let me see what we have.",
    "I'll start by listing the directory.",
    "Let me explore the directory first.",
)
PEEK = (
    "Let me check the format.",
    "Let me peek at the first lines.",
    "Checking what the data looks like.",
    "A quick look at the contents first.",
)
ACT = ("Now the actual change.", "Doing it now.", "Now I'll make the change.", "Making the change.")
QUERY = ("Now the numbers.", "Computing it.", "Let me count.", "Running the query.", "Now let me work it out.")
CHECK = ("Let me verify the result.", "Checking the result.", "Let me double-check.", "Verifying.")
FIRST = (
    "alice",
    "bob",
    "carol",
    "dave",
    "erin",
    "frank",
    "grace",
    "heidi",
    "ivan",
    "judy",
    "mallory",
    "nina",
    "oscar",
    "peggy",
    "rupert",
    "sybil",
    "trent",
    "victor",
    "wendy",
    "yusuf",
    "zoe",
    "liam",
)
LAST = (
    "smith",
    "jones",
    "garcia",
    "chen",
    "kumar",
    "novak",
    "rossi",
    "silva",
    "tanaka",
    "okafor",
    "larsen",
    "dubois",
    "khan",
    "ivanova",
    "murphy",
)
WORDS = (
    "the",
    "data",
    "system",
    "river",
    "light",
    "model",
    "garden",
    "signal",
    "window",
    "market",
    "stone",
    "paper",
    "cloud",
    "north",
    "engine",
    "winter",
    "music",
    "city",
    "forest",
    "bridge",
    "simple",
    "quick",
    "green",
    "quiet",
    "small",
    "bright",
    "open",
    "early",
    "again",
    "always",
)


def say(rng: random.Random, pool: tuple[str, ...], p: float = 0.6) -> str | None:
    """A phrase from ``pool`` with probability ``p``, else None (a bare tool call)."""
    return rng.choice(pool) if rng.random() < p else None


def fixture(files: dict[str, str], workdir: str, extra_setup: str = "") -> Fixture:
    """A fixture whose setup starts with :data:`SETUP_HEAD`."""
    setup = SETUP_HEAD + ("\n" + extra_setup.strip() if extra_setup.strip() else "")
    return Fixture(files=files, setup=setup, workdir=workdir)


STUMBLE_RATE = 0.2
"""Chance that a family with a plausible slip starts with it (an ``Error:`` result, then the fix)."""


def stumble(rng: random.Random, command: str, code: int, say_text: str | None = None) -> list[Step]:
    """A failing first try (exit status ``code``, an error on stderr) with probability :data:`STUMBLE_RATE`."""
    return [Step(command, say=say_text, expect_rc=code)] if rng.random() < STUMBLE_RATE else []


def unless(fail: bool, items: list) -> list:
    """``items``, or nothing when the expert is failing (its wrong command has no equivalents)."""
    return [] if fail else items


def lines_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def first_int(text: str) -> int | None:
    """The first integer in ``text`` (None when there is none)."""
    m = re.search(r"-?\d+", text)
    return int(m.group()) if m else None


def counts_table(text: str) -> list[tuple[int, str]]:
    """Parse ``uniq -c`` output into ``(count, value)`` pairs, in order."""
    out = []
    for line in lines_of(text):
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0].isdigit():
            out.append((int(parts[0]), parts[1]))
    return out


def distinct_counts(rng: random.Random, keys: list[str], top: int, low: int, high: int) -> dict[str, int]:
    """Counts in ``[low, high]`` for ``keys`` whose ``top`` largest are distinct and strictly above the rest."""
    ranked = rng.sample(keys, len(keys))
    tops = sorted(rng.sample(range(low + 1, high + 1), top), reverse=True)
    counts = dict(zip(ranked, tops))
    for k in ranked[top:]:
        counts[k] = rng.randint(low, tops[-1] - 1)
    return counts


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def join_words(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


# --------------------------------------------------------------------------- log analysis

LOG_MESSAGES = {
    "INFO": (
        "request served in {n}ms",
        "user {u} logged in",
        "cache warmed with {n} keys",
        "job {j} finished",
        "error budget recomputed for {u}",
    ),
    "WARN": ("slow query took {n}ms", "retrying connection, attempt {k}", "disk usage at {k}0 percent"),
    "ERROR": (
        "connection refused by upstream",
        "timeout after {n}ms",
        "failed to write record {j}",
        "invalid token for user {u}",
    ),
    "DEBUG": ("payload size {n} bytes", "opened session {j}"),
}
COMPONENTS = ("auth", "db", "api", "cache", "scheduler", "payments")


def make_log(rng: random.Random, n: int, day: int, error_comps: dict[str, int]) -> list[str]:
    """A log of ``n`` lines whose ERROR lines come exactly from ``error_comps``."""
    levels = [lvl for comp, k in error_comps.items() for lvl in ["ERROR:" + comp] * k]
    others = rng.choices(["INFO", "WARN", "DEBUG"], weights=[6, 2, 1], k=max(0, n - len(levels)))
    events = levels + others
    rng.shuffle(events)
    out, t = [], rng.randint(0, 3600)
    for ev in events:
        t += rng.randint(1, 240)
        level, _, comp = ev.partition(":")
        comp = comp or rng.choice(COMPONENTS)
        msg = rng.choice(LOG_MESSAGES[level]).format(
            n=rng.randint(5, 3000), u=rng.choice(FIRST), j=rng.randint(100, 999), k=rng.randint(2, 9)
        )
        stamp = f"2024-03-{day:02d} {t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d}"
        out.append(f"{stamp} {level} [{comp}] {msg}")
    return out


def error_mix(rng: random.Random) -> dict[str, int]:
    comps = rng.sample(COMPONENTS, rng.randint(2, 4))
    return distinct_counts(rng, comps, top=1, low=1, high=rng.randint(3, 6))


@family("log_errors")
def log_errors(rng: random.Random, fail: bool) -> TaskPlan:
    cur_mix, old_mix = error_mix(rng), error_mix(rng)
    while sum(old_mix.values()) == sum(cur_mix.values()):
        old_mix = error_mix(rng)
    app = make_log(rng, rng.randint(24, 40), 12, cur_mix)
    old = make_log(rng, rng.randint(16, 26), 11, old_mix)
    worker = make_log(rng, rng.randint(8, 14), 12, {})
    files = {
        "logs/app.log": "\n".join(app) + "\n",
        "logs/app.log.1": "\n".join(old) + "\n",
        "logs/worker.log": "\n".join(worker) + "\n",
        "README.md": "# shop-backend\n\nService logs are written to logs/ and rotated daily.\n",
    }
    n_err = sum(cur_mix.values())
    top = max(cur_mix, key=lambda c: cur_mix[c])
    target = "logs/app.log.1" if fail else "logs/app.log"
    extract = rng.random() < 0.4
    steps: list[Step] = []
    if rng.random() < 0.2:
        steps.append(Step("head -n 5 app.log", say="Let me look at the log.", expect_rc=1))
        steps.append(
            Step("ls", say="It is not at the top level; listing the directory.", alternatives=["ls -1", "ls ."])
        )
    steps.append(
        Step(
            "ls logs",
            say=None if steps else say(rng, LOOK),
            alternatives=["ls logs/", "ls -1 logs"],
            near_misses=[("find logs -type f", "lists the same files but with the logs/ prefix")],
        )
    )
    steps.append(
        Step(
            "head -n 5 logs/app.log",
            say=say(rng, PEEK),
            alternatives=["head -5 logs/app.log", "sed -n '1,5p' logs/app.log", "awk 'NR <= 5' logs/app.log"],
            near_misses=[("head logs/app.log", "prints 10 lines instead of 5")],
        )
    )
    if extract:
        user = rng.choice(
            (
                "Please collect every ERROR line of the current application log (logs/app.log) into errors.txt "
                "in this folder and tell me how many there are.",
                "Can you pull all the ERROR entries out of logs/app.log into a file called errors.txt? I also need the count.",
                "I need the ERROR lines from today's app log (logs/app.log) saved in errors.txt, plus how many there were.",
            )
        )
        pattern = "grep -i error" if fail else "grep ERROR"
        steps.append(
            Step(
                f"{pattern} logs/app.log > errors.txt",
                say=say(rng, ACT),
                alternatives=unless(
                    fail,
                    [
                        "grep 'ERROR' logs/app.log > errors.txt",
                        "awk '/ERROR/' logs/app.log > errors.txt",
                        "grep -F ERROR logs/app.log > errors.txt",
                    ],
                ),
                near_misses=unless(
                    fail,
                    [("grep ERROR logs/app.log | tee errors.txt", "writes the same file but also prints every line")],
                ),
            )
        )
        steps.append(
            Step(
                "wc -l < errors.txt",
                label="count",
                say=say(rng, CHECK),
                alternatives=["cat errors.txt | wc -l", "grep -c '' errors.txt"],
                near_misses=[("wc -l errors.txt", "prints the file name after the count")],
            )
        )
        steps.append(Step("head -n 3 errors.txt", alternatives=["head -3 errors.txt", "sed -n '1,3p' errors.txt"]))
        truth = [line for line in app if " ERROR " in line]

        def finish(o: Outcome) -> Finish:
            n = first_int(o.outputs["count"]) or 0
            text = rng.choice(
                (
                    f"Done: errors.txt now holds the {n} ERROR lines from logs/app.log.",
                    f"I saved {plural(n, 'ERROR line')} from logs/app.log into errors.txt; the first few are shown above.",
                    f"errors.txt contains {plural(n, 'line')}: every ERROR entry of the current app log.",
                )
            )
            got = (o.final.text("errors.txt") or "").splitlines()
            return Finish([text], got == truth)

        failure = "matched 'error' case-insensitively, so non-ERROR lines that mention 'error' were copied too"
        return TaskPlan(fixture(files, "/srv/app"), [Segment(user, steps)], finish, failure if fail else None)

    user = rng.choice(
        (
            "How many ERROR lines are in the current application log (logs/app.log), and which component produces most of them?",
            "Count the errors in logs/app.log for me. Which component is the noisiest?",
            "Can you check today's app log (logs/app.log, not the rotated one) and tell me how many ERROR entries it has and where they come from?",
            "I need the number of ERROR-level lines in logs/app.log and a breakdown by component.",
        )
    )
    steps.append(
        Step(
            f"grep -c ERROR {target}",
            label="count",
            say=say(rng, QUERY),
            alternatives=unless(
                fail,
                [
                    f"grep ERROR {target} | wc -l",
                    f"awk '/ERROR/ {{n++}} END {{print n+0}}' {target}",
                    f"grep -c 'ERROR' {target}",
                ],
            ),
            near_misses=unless(
                fail,
                [
                    ("grep -c ERROR logs/*.log", "counts every log and prefixes each count with the file name"),
                    ("grep -ci error logs/app.log", "case-insensitive: also counts lines that merely mention 'error'"),
                ],
            ),
        )
    )
    steps.append(
        Step(
            f"grep ERROR {target} | awk '{{print $4}}' | sort | uniq -c | sort -rn",
            label="by_comp",
            say=rng.choice(("Now the breakdown by component.", "And per component:", None)),
            alternatives=unless(
                fail,
                [
                    f"awk '$3 == \"ERROR\" {{print $4}}' {target} | sort | uniq -c | sort -rn",
                    f"grep ERROR {target} | cut -d' ' -f4 | sort | uniq -c | sort -rn",
                ],
            ),
        )
    )
    segments = [Segment(user, steps)]
    follow = rng.random() < 0.35
    if follow:
        segments.append(
            Segment(
                rng.choice(
                    (
                        "Thanks! Could you also save those ERROR lines to errors.txt?",
                        "Great. Please put the ERROR lines into errors.txt as well.",
                    )
                ),
                [
                    Step(
                        f"grep ERROR {target} > errors.txt",
                        say=say(rng, ACT),
                        alternatives=[f"awk '/ERROR/' {target} > errors.txt", f"grep -F ERROR {target} > errors.txt"],
                    ),
                    Step(
                        "wc -l < errors.txt",
                        label="saved",
                        say=say(rng, CHECK),
                        alternatives=["cat errors.txt | wc -l"],
                        near_misses=[("wc -l errors.txt", "prints the file name after the count")],
                    ),
                ],
            )
        )

    def finish(o: Outcome) -> Finish:
        n = first_int(o.outputs["count"]) or 0
        table = counts_table(o.outputs["by_comp"])
        comp, k = table[0][1].strip("[]"), table[0][0]
        rest = join_words([f"{c.strip('[]')} ({m})" for m, c in table[1:]])
        text = rng.choice(
            (
                f"logs/app.log has {plural(n, 'ERROR line')}. The noisiest component is {comp} with {k}"
                + (f", followed by {rest}." if rest else "."),
                f"I found {n} ERROR entries in the current log. Most come from [{comp}] ({k})"
                + (f"; the others: {rest}." if rest else "."),
            )
        )
        texts = [text]
        solved = n == n_err and comp == top
        if follow:
            saved = first_int(o.outputs["saved"]) or 0
            texts.append(f"Saved: errors.txt holds the {saved} ERROR lines.")
            solved = solved and (o.final.text("errors.txt") or "").count("\n") == n_err
        return Finish(texts, solved)

    return TaskPlan(
        fixture(files, "/srv/app"),
        segments,
        finish,
        "counted the errors in the rotated log logs/app.log.1 instead of logs/app.log" if fail else None,
    )


# --------------------------------------------------------------------------- access log

PATHS = ("/", "/login", "/api/items", "/api/cart", "/static/app.js", "/static/style.css", "/checkout", "/search")
MISSING = ("/favicon.ico", "/old-page", "/api/v1/items", "/robots.txt", "/wp-admin")


@family("access_log")
def access_log(rng: random.Random, fail: bool) -> TaskPlan:
    ips = rng.sample(
        [f"10.0.0.{i}" for i in range(2, 60)] + [f"192.168.1.{i}" for i in range(2, 60)], rng.randint(5, 8)
    )
    per_ip = distinct_counts(rng, ips, top=4, low=1, high=rng.randint(9, 14))
    events = [ip for ip in ips for _ in range(per_ip[ip])]
    rng.shuffle(events)
    n404 = 0
    lines = []
    for idx, ip in enumerate(events):
        status = 404 if idx == 4 else rng.choices([200, 404, 301, 500], weights=[12, 3, 1, 1])[0]
        path = rng.choice(MISSING) if status == 404 else rng.choice(PATHS)
        size = rng.randint(200, 9000) if status != 404 else rng.randint(150, 300)
        if idx == 2:  # a byte count that contains 404: a plain `grep 404` over-counts
            status, path, size = 200, rng.choice(PATHS), rng.choice((1404, 4040, 4046, 2404))
        n404 += status == 404
        t = 8 * 3600 + idx * 37
        lines.append(
            f"{ip} - - [12/Mar/2024:{t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d} +0000] "
            f'"{rng.choice(("GET", "GET", "POST"))} {path} HTTP/1.1" {status} {size}'
        )
    files = {
        "logs/access.log": "\n".join(lines) + "\n",
        "logs/error.log": "[warn] upstream timed out\n[error] worker 3 exited\n",
        "conf/site.conf": "server_name shop.example;\nlisten 80;\n",
    }
    steps = [
        Step("ls logs", say=say(rng, LOOK), alternatives=["ls logs/", "ls -1 logs"]),
        Step(
            "head -n 3 logs/access.log",
            say=say(rng, PEEK),
            alternatives=["head -3 logs/access.log", "sed -n '1,3p' logs/access.log"],
            near_misses=[("tail -n 3 logs/access.log", "shows the last lines, not the first")],
        ),
    ]
    if rng.random() < 0.5:
        user = rng.choice(
            (
                "Which three client IPs made the most requests according to logs/access.log? Give me their counts.",
                "Find the top 3 IP addresses by number of requests in the access log.",
                "Who is hitting the site the most? List the three busiest client IPs from logs/access.log with request counts.",
            )
        )
        steps.append(
            Step(
                "wc -l < logs/access.log",
                label="total",
                say="How many requests in total?",
                alternatives=["cat logs/access.log | wc -l", "grep -c '' logs/access.log"],
                near_misses=[("wc -l logs/access.log", "prints the file name after the count")],
            )
        )
        order = "sort -n" if fail else "sort -rn"
        steps.append(
            Step(
                f"awk '{{print $1}}' logs/access.log | sort | uniq -c | {order} | head -n 3",
                label="top",
                say=say(rng, QUERY),
                alternatives=unless(
                    fail,
                    [
                        "cut -d' ' -f1 logs/access.log | sort | uniq -c | sort -rn | head -n 3",
                        "awk '{print $1}' logs/access.log | sort | uniq -c | sort -nr | head -3",
                    ],
                ),
                near_misses=unless(
                    fail,
                    [
                        (
                            "awk '{print $1}' logs/access.log | sort | uniq -c | sort -n | tail -n 3",
                            "the same three IPs, but in ascending order",
                        )
                    ],
                ),
            )
        )
        top3 = sorted(ips, key=lambda ip: -per_ip[ip])[:3]

        def finish(o: Outcome) -> Finish:
            table = counts_table(o.outputs["top"])
            total = first_int(o.outputs["total"])
            listing = join_words([f"{ip} ({n})" for n, ip in table])
            text = rng.choice(
                (
                    f"Out of {total} requests, the busiest clients are {listing}.",
                    f"Top 3 IPs by request count: {listing} (out of {total} requests in total).",
                    f"The three IPs with the most requests are {listing}.",
                )
            )
            return Finish([text], [ip for _, ip in table] == top3)

        return TaskPlan(
            fixture(files, "/var/www"),
            [Segment(user, steps)],
            finish,
            "sorted the counts ascending, so it reported the least active IPs" if fail else None,
        )

    user = rng.choice(
        (
            "How many requests in logs/access.log returned a 404, and for which paths?",
            "Count the 404 responses in the access log and tell me which URLs were not found.",
            "I keep seeing broken links. Check logs/access.log: how many 404s, and on which paths?",
        )
    )
    if fail:
        steps.append(Step("grep -c 404 logs/access.log", label="n404", say=say(rng, QUERY)))
        steps.append(Step("grep 404 logs/access.log | awk '{print $7}' | sort | uniq -c | sort -rn", label="paths"))
    else:
        steps.append(
            Step(
                "awk '$9 == 404' logs/access.log | wc -l",
                label="n404",
                say=say(rng, QUERY),
                alternatives=[
                    "awk '$9 == 404 {n++} END {print n+0}' logs/access.log",
                    "grep -c '\" 404 ' logs/access.log",
                ],
                near_misses=[("grep -c 404 logs/access.log", "also matches 404 inside byte counts, so it over-counts")],
            )
        )
        steps.append(
            Step(
                "awk '$9 == 404 {print $7}' logs/access.log | sort | uniq -c | sort -rn",
                label="paths",
                say=rng.choice(("And which paths:", "Now the paths behind them.", None)),
                alternatives=[
                    "grep '\" 404 ' logs/access.log | awk '{print $7}' | sort | uniq -c | sort -rn",
                    "grep '\" 404 ' logs/access.log | cut -d' ' -f7 | sort | uniq -c | sort -rn",
                ],
            )
        )

    def finish_404(o: Outcome) -> Finish:
        n = first_int(o.outputs["n404"]) or 0
        listing = join_words([f"{p} ({k})" for k, p in counts_table(o.outputs["paths"])])
        text = rng.choice(
            (
                f"There were {plural(n, '404 response')}. Missing paths: {listing}.",
                f"logs/access.log has {n} requests answered with 404, on {listing}.",
            )
        )
        return Finish([text], n == n404)

    return TaskPlan(
        fixture(files, "/var/www"),
        [Segment(user, steps)],
        finish_404,
        "grepped for the bare string 404, which also matches byte counts, and over-counted" if fail else None,
    )


# --------------------------------------------------------------------------- CSV

REGIONS = ("north", "south", "east", "west")
PRODUCTS = ("widget", "gadget", "gizmo", "sprocket")


@family("csv_sum")
def csv_sum(rng: random.Random, fail: bool) -> TaskPlan:
    rows = []
    for d in range(rng.randint(12, 22)):
        rows.append(
            (f"2024-03-{d + 1:02d}", rng.choice(REGIONS), rng.choice(PRODUCTS), rng.randint(1, 40), rng.randint(5, 99))
        )
    region = rng.choice(sorted({r[1] for r in rows}))
    csv = "date,region,product,units,price\n" + "".join(f"{a},{b},{c},{d},{e}\n" for a, b, c, d, e in rows)
    files = {
        "data/sales.csv": csv,
        "data/README.txt": "sales.csv: one row per order line (units sold, unit price in USD)\n",
        "notes.txt": "Q1 numbers are preliminary.\n",
    }
    col = 5 if fail else 4
    steps = stumble(rng, "head -n 5 sales.csv", 1, "Let me look at the CSV.")
    steps += [
        Step(
            "ls data",
            say="It lives somewhere else; checking data/." if steps else say(rng, LOOK),
            alternatives=["ls data/", "ls -1 data"],
        ),
        Step(
            "head -n 5 data/sales.csv",
            say=say(rng, PEEK),
            alternatives=["head -5 data/sales.csv", "sed -n '1,5p' data/sales.csv"],
        ),
    ]
    by_region = rng.random() < 0.5
    if by_region:
        user = rng.choice(
            (
                f"What is the total number of units sold in the {region} region? The data is in data/sales.csv.",
                f"Sum up the units column of data/sales.csv for region '{region}' only.",
                f"How many units did we sell in {region}? Use data/sales.csv.",
            )
        )
        truth = sum(r[3] for r in rows if r[1] == region)
        steps.append(
            Step(
                f"awk -F, '$2 == \"{region}\" {{sum += ${col}}} END {{print sum}}' data/sales.csv",
                label="sum",
                say=say(rng, QUERY),
                alternatives=unless(
                    fail,
                    [
                        f"grep ',{region},' data/sales.csv | cut -d, -f4 | awk '{{s += $1}} END {{print s}}'",
                        f"awk -F, '$2==\"{region}\"{{s+=$4}} END{{print s}}' data/sales.csv",
                    ],
                ),
            )
        )
        steps.append(
            Step(
                f"grep -c ',{region},' data/sales.csv",
                label="rows",
                say="And how many rows that covers:",
                alternatives=[f"awk -F, '$2 == \"{region}\"' data/sales.csv | wc -l"],
            )
        )
    else:
        user = rng.choice(
            (
                "What's the total of the units column in data/sales.csv?",
                "Add up all units sold in data/sales.csv and tell me the total.",
                "Give me the total number of units across every row of data/sales.csv (skip the header).",
            )
        )
        truth = sum(r[3] for r in rows)
        steps.append(
            Step(
                f"awk -F, 'NR > 1 {{sum += ${col}}} END {{print sum}}' data/sales.csv",
                label="sum",
                say=say(rng, QUERY),
                alternatives=unless(
                    fail,
                    [
                        "tail -n +2 data/sales.csv | cut -d, -f4 | awk '{s += $1} END {print s}'",
                        "awk -F, 'NR>1{s+=$4} END{print s}' data/sales.csv",
                        "awk -F, '{sum += $4} END {print sum}' data/sales.csv",
                    ],
                ),  # the header adds 0
                near_misses=unless(
                    fail,
                    [
                        (
                            "awk -F, 'NR > 1 {sum += $5} END {print sum}' data/sales.csv",
                            "sums the price column instead of units",
                        )
                    ],
                ),
            )
        )
        steps.append(
            Step(
                "tail -n +2 data/sales.csv | wc -l",
                label="rows",
                say="Number of data rows, for context:",
                alternatives=["awk 'NR > 1' data/sales.csv | wc -l", "sed 1d data/sales.csv | wc -l"],
            )
        )
    segments = [Segment(user, steps)]
    follow = rng.random() < 0.35
    out_file = "data/total_units.txt"
    if follow:  # the follow-up recomputes the number into the file (nothing is copied by hand)
        cond = f'$2 == "{region}"' if by_region else "NR > 1"
        segments.append(
            Segment(
                rng.choice(
                    (f"Thanks. Please write that number into {out_file}.", f"Can you save the total to {out_file}?")
                ),
                [
                    Step(
                        f"awk -F, '{cond} {{sum += ${col}}} END {{print sum}}' data/sales.csv > {out_file}",
                        say=say(rng, ACT),
                        alternatives=unless(
                            fail, [f"awk -F, '{cond} {{s += $4}} END {{print s}}' data/sales.csv > {out_file}"]
                        ),
                    ),
                    Step(f"cat {out_file}", say=say(rng, CHECK), alternatives=[f"head -n 1 {out_file}"]),
                ],
            )
        )

    def finish(o: Outcome) -> Finish:
        total = first_int(o.outputs["sum"])
        n = first_int(o.outputs["rows"])
        where = f"in {region} " if by_region else ""
        texts = [
            rng.choice(
                (
                    f"The total is {total} units sold {where}across {plural(n or 0, 'row')}.",
                    f"{total} units {where}in total ({plural(n or 0, 'order line')}).",
                )
            )
        ]
        solved = total == truth
        if follow:
            texts.append(f"Written: {out_file} contains {total}.")
            solved = solved and (o.final.text(out_file) or "").strip() == str(truth)
        return Finish(texts, solved)

    return TaskPlan(
        fixture(files, "/home/user/reports"),
        segments,
        finish,
        "summed the price column instead of the units column" if fail else None,
    )


DEPTS = ("engineering", "sales", "marketing", "support")


@family("csv_extract")
def csv_extract(rng: random.Random, fail: bool) -> TaskPlan:
    people, seen, size = [], set(), rng.randint(10, 16)
    while len(people) < size:
        first, last = rng.choice(FIRST), rng.choice(LAST)
        if (first, last) in seen:
            continue
        seen.add((first, last))
        people.append(
            (
                len(people) + 101,
                f"{first.title()} {last.title()}",
                f"{first}.{last}@example.com",
                rng.choice(DEPTS),
                rng.randint(40, 140) * 1000,
            )
        )
    dept = rng.choice(sorted({p[3] for p in people}))
    csv = "id,name,email,department,salary\n" + "".join(f"{a},{b},{c},{d},{e}\n" for a, b, c, d, e in people)
    files = {
        "staff.csv": csv,
        "old/staff_2022.csv": "id,name,email,department,salary\n101,Ann Lee,ann.lee@example.com,sales,50000\n",
    }
    out = f"{dept}_emails.txt"
    user = rng.choice(
        (
            f"From staff.csv, write the email addresses of everyone in the {dept} department into {out}, one per line, no header.",
            f"I need a plain list of {dept} emails (one per line) in {out}. The source is staff.csv.",
            f"Extract the email column for department '{dept}' from staff.csv and save it as {out}. How many are there?",
        )
    )
    field_no = 2 if fail else 3
    steps = [
        Step("ls", say=say(rng, LOOK), alternatives=["ls -1", "ls ."]),
        Step("head -n 4 staff.csv", say=say(rng, PEEK), alternatives=["head -4 staff.csv", "sed -n '1,4p' staff.csv"]),
        Step(
            "tail -n +2 staff.csv | cut -d, -f4 | sort | uniq -c",
            say="Departments and their sizes:",
            alternatives=[
                "awk -F, 'NR > 1 {print $4}' staff.csv | sort | uniq -c",
                "cut -d, -f4 staff.csv | tail -n +2 | sort | uniq -c",
            ],
        ),
        Step(
            f"awk -F, '$4 == \"{dept}\" {{print ${field_no}}}' staff.csv > {out}",
            say=say(rng, ACT),
            alternatives=unless(
                fail,
                [
                    f"grep ',{dept},' staff.csv | cut -d, -f3 > {out}",
                    f"awk -F, '$4==\"{dept}\"{{print $3}}' staff.csv > {out}",
                ],
            ),
            near_misses=unless(
                fail, [(f"grep ',{dept},' staff.csv > {out}", "writes the whole rows, not just the email column")]
            ),
        ),
        Step(f"cat {out}", label="list", say=say(rng, CHECK), alternatives=[f"cat ./{out}", f"sed -n p {out}"]),
        Step(
            f"wc -l < {out}",
            label="count",
            alternatives=[f"cat {out} | wc -l"],
            near_misses=[(f"wc -l {out}", "prints the file name after the count")],
        ),
    ]
    truth = [p[2] for p in people if p[3] == dept]

    def finish(o: Outcome) -> Finish:
        n = first_int(o.outputs["count"]) or 0
        text = rng.choice(
            (
                f"{out} now lists the {plural(n, 'email address')} of the {dept} team, one per line.",
                f"Done. I wrote {n} {dept} addresses to {out} (no header).",
            )
        )
        return Finish([text], (o.final.text(out) or "").splitlines() == truth)

    return TaskPlan(
        fixture(files, "/home/user/hr"),
        [Segment(user, steps)],
        finish,
        "printed the name column ($2) instead of the email column" if fail else None,
    )


# --------------------------------------------------------------------------- find / move / delete

SRC_FILES = (
    "src/main.py",
    "src/util.py",
    "src/io/reader.py",
    "src/io/writer.py",
    "docs/index.md",
    "docs/api/usage.md",
    "tests/test_main.py",
    "setup.cfg",
)


@family("find_delete")
def find_delete(rng: random.Random, fail: bool) -> TaskPlan:
    ext = rng.choice(("bak", "tmp", "orig", "swp"))
    keep = rng.sample(SRC_FILES, rng.randint(5, 8))
    dirs = sorted({k.rsplit("/", 1)[0] for k in keep if "/" in k})
    junk = [f"{rng.choice(('notes', 'draft', 'config', 'old'))}.{ext}"]
    for d in rng.sample(dirs, min(len(dirs), rng.randint(2, 4))):
        junk.append(f"{d}/{rng.choice(('main', 'scratch', 'copy', 'edit'))}.{ext}")
    files = {k: f"# {k}\n" for k in keep}
    files.update({j: "leftover\n" for j in junk})
    files[f"docs/keep-{ext}-files.md"] = f"Do not delete this page about .{ext} files.\n"
    user = rng.choice(
        (
            f"Delete every *.{ext} file anywhere in this project, including subfolders.",
            f"Please clean out all the .{ext} files in this tree (they're editor leftovers). Don't touch anything else.",
            f"Remove all files ending in .{ext}, recursively. Show me what was removed.",
        )
    )
    q = f"'*.{ext}'"
    act = (
        Step(f"rm -f *.{ext}", say=say(rng, ACT))
        if fail
        else Step(
            f"find . -name {q} -delete",
            say=say(rng, ACT),
            alternatives=[
                f"find . -name {q} -exec rm {{}} +",
                f"find . -type f -name {q} -exec rm -f {{}} \\;",
                f"find . -name {q} -print0 | xargs -0 rm",
            ],
            near_misses=[(f"find . -name {q} -print -delete", "deletes the same files but prints each one")],
        )
    )
    steps = [
        Step(
            f"find . -name {q} | sort",
            say=say(rng, LOOK),
            alternatives=[f"find . -type f -name {q} | sort", f'find . -name "*.{ext}" | sort'],
            near_misses=[(f"ls *.{ext}", "only looks at the top level")],
        ),
        act,
        Step(
            f"find . -name {q} | wc -l",
            label="left",
            say=say(rng, CHECK),
            alternatives=[f"find . -type f -name {q} | wc -l"],
        ),
        Step("find . -type f | sort", label="tree", alternatives=["find . -type f -print | sort"]),
    ]

    def finish(o: Outcome) -> Finish:
        left = first_int(o.outputs["left"])
        text = rng.choice(
            (
                f"Removed {plural(len(junk), f'.{ext} file')}; {left} remain and the other files are untouched.",
                f"All .{ext} files are gone ({len(junk)} deleted). The remaining tree is listed above.",
            )
        )
        ok = all(j not in o.final.files for j in junk) and all(k in o.final.files for k in keep)
        return Finish([text], ok)

    return TaskPlan(
        fixture(files, "/testbed"),
        [Segment(user, steps)],
        finish,
        f"used `rm -f *.{ext}`, which only deletes top-level files, not those in subfolders" if fail else None,
    )


@family("organize_ext")
def organize_ext(rng: random.Random, fail: bool) -> TaskPlan:
    stems = rng.sample(
        (
            "holiday",
            "scan",
            "receipt",
            "cat",
            "beach",
            "invoice",
            "ticket",
            "diagram",
            "logo",
            "report",
            "contract",
            "screenshot",
            "map",
            "menu",
        ),
        9,
    )
    names = [f"{stems[0]}.jpg", f"{stems[1]}.png", f"{stems[2]}.pdf", f"{stems[3]}.txt"]
    names += [f"{s}.{rng.choice(('jpg', 'png', 'pdf', 'txt', 'zip'))}" for s in stems[4:]]
    files = {f"downloads/{n}": f"placeholder for {n}\n" for n in names}
    files["downloads/archive/old.pdf"] = "already filed\n"
    images = sorted(n for n in names if n.endswith((".jpg", ".png")))
    pdfs = sorted(n for n in names if n.endswith(".pdf"))
    user = rng.choice(
        (
            "Tidy up downloads/: move all .jpg and .png files into downloads/images and all PDFs into downloads/docs.",
            "Sort my downloads folder: images (jpg/png) go to downloads/images/, PDFs to downloads/docs/. Leave everything else.",
            "Please create downloads/images and downloads/docs and file the pictures and PDFs from downloads/ into them.",
        )
    )
    steps = [
        Step(
            "ls downloads",
            say=say(rng, LOOK),
            alternatives=["ls downloads/", "ls -1 downloads"],
            near_misses=[("ls -R downloads", "also lists the contents of downloads/archive")],
        ),
        Step(
            "mkdir -p downloads/images downloads/docs",
            say=say(rng, ACT),
            alternatives=[
                "mkdir -p downloads/{images,docs}",
                "mkdir downloads/images downloads/docs",
                "mkdir -p downloads/docs downloads/images",
            ],
            near_misses=[("mkdir -pv downloads/images downloads/docs", "creates the same folders but prints them")],
        ),
    ]
    if rng.random() < 0.2:
        steps.append(Step("mv downloads/*.JPG downloads/images/", expect_rc=1))
    if fail:
        steps.append(Step("mv downloads/*.jpg downloads/images/"))
    else:
        steps.append(
            Step(
                "mv downloads/*.jpg downloads/*.png downloads/images/",
                say="The extensions are lowercase." if steps[-1].expect_rc else None,
                alternatives=[
                    "mv downloads/*.png downloads/*.jpg downloads/images",
                    "mv -t downloads/images downloads/*.jpg downloads/*.png",
                    "find downloads -maxdepth 1 -type f \\( -name '*.jpg' -o -name '*.png' \\) "
                    "-exec mv {} downloads/images/ \\;",
                ],
                near_misses=[
                    (
                        "mv -v downloads/*.jpg downloads/*.png downloads/images/",
                        "moves the same files but prints every move",
                    )
                ],
            )
        )
    steps.append(
        Step(
            "mv downloads/*.pdf downloads/docs/",
            alternatives=["mv downloads/*.pdf downloads/docs", "mv -t downloads/docs downloads/*.pdf"],
            near_misses=[
                (
                    "mv downloads/*.pdf downloads/docs/ downloads/archive/",
                    "moves the PDFs and docs/ itself into archive/",
                )
            ],
        )
    )
    steps.append(
        Step(
            "ls -R downloads",
            label="tree",
            say=say(rng, CHECK),
            near_misses=[("ls -R downloads/", "same listing, but the headers read 'downloads/:'")],
        )
    )

    def finish(o: Outcome) -> Finish:
        text = rng.choice(
            (
                f"Done: {plural(len(images), 'image')} moved to downloads/images and {plural(len(pdfs), 'PDF')} "
                "to downloads/docs; the other files stay where they were.",
                f"downloads/ is sorted. images/ now has {join_words(images)}; docs/ has {join_words(pdfs)}.",
            )
        )
        fs = o.final.files
        ok = all(f"downloads/images/{n}" in fs for n in images) and all(f"downloads/docs/{n}" in fs for n in pdfs)
        return Finish([text], ok)

    return TaskPlan(
        fixture(files, "/home/user"),
        [Segment(user, steps)],
        finish,
        "moved only the .jpg files and forgot the .png images" if fail else None,
    )


@family("large_files")
def large_files(rng: random.Random, fail: bool) -> TaskPlan:
    dirs = ("storage/video", "storage/raw", "storage/cache", "storage/exports")
    names = rng.sample(("clip", "dump", "frames", "backup", "capture", "trace", "sample", "bundle", "export"), 7)
    sizes = {}
    for i, name in enumerate(names):
        path = f"{rng.choice(dirs)}/{name}.bin"
        if i < 2:
            sizes[path] = rng.randint(150, 260) * 1024 + rng.randint(0, 999)
        elif i < 4:
            sizes[path] = rng.randint(58, 90) * 1024
        else:
            sizes[path] = rng.randint(1, 30) * 1024 + rng.randint(0, 999)
    files = {
        "storage/README.txt": "Scratch storage. Anything over 100 KB belongs in archive/large.\n",
        "storage/cache/index.txt": "cache index\n",
    }
    setup = "\n".join(
        f"mkdir -p {p.rsplit('/', 1)[0]} && head -c {s} /dev/zero > {p}" for p, s in sorted(sizes.items())
    )
    setup += "\nchmod 644 storage/*/*.bin"
    big = sorted(p for p, s in sizes.items() if s > 100 * 1024)
    user = rng.choice(
        (
            "Find every file under storage/ bigger than 100 KB and move them into archive/large/ (create it).",
            "Our storage folder is filling up. Move the files over 100 kilobytes into archive/large, flat, and list what moved.",
            "Please relocate large files (>100 KB) from storage/ to a new archive/large directory.",
        )
    )
    flag = "+100" if fail else "+100k"
    steps = [
        Step("find storage -type f | sort", say=say(rng, LOOK), alternatives=["find storage -type f -print | sort"]),
        Step(
            f"find storage -type f -size {flag} | sort",
            label="found",
            say="Which ones are over 100 KB?",
            alternatives=unless(
                fail, ["find storage -size +100k -type f | sort", "find storage/ -type f -size +100k | sort"]
            ),
            near_misses=unless(
                fail,
                [
                    (
                        "find storage -type f -size +100 | sort",
                        "without a unit -size counts 512-byte blocks, so files over 50 KiB match",
                    )
                ],
            ),
        ),
        Step(
            f"wc -c $(find storage -type f -size {flag} | sort)",
            say="Their exact sizes:",
            alternatives=unless(fail, ["find storage -type f -size +100k | sort | xargs wc -c"]),
        ),
        Step(
            f"mkdir -p archive/large && find storage -type f -size {flag} -exec mv {{}} archive/large/ \\;",
            say=say(rng, ACT),
            alternatives=unless(
                fail,
                [
                    "mkdir -p archive/large && mv $(find storage -type f -size +100k) archive/large/",
                    "mkdir -p archive/large; find storage -type f -size +100k -exec mv -t archive/large {} +",
                ],
            ),
        ),
        Step(
            "find archive storage -type f | sort",
            label="tree",
            say=say(rng, CHECK),
            alternatives=["find storage archive -type f | sort"],
        ),
    ]

    def finish(o: Outcome) -> Finish:
        moved = sorted(p.rsplit("/", 1)[1] for p in o.final.files if p.startswith("archive/large/"))
        text = rng.choice(
            (
                f"Moved {plural(len(moved), 'file')} over 100 KB into archive/large: {join_words(moved)}.",
                f"archive/large now holds {join_words(moved)}; everything smaller stayed in storage/.",
            )
        )
        return Finish([text], moved == sorted(p.rsplit("/", 1)[1] for p in big))

    return TaskPlan(
        fixture(files, "/data", setup),
        [Segment(user, steps)],
        finish,
        "used `-size +100` (512-byte blocks, about 50 KiB) so medium files were moved too" if fail else None,
    )


# --------------------------------------------------------------------------- directories and small files

PROJECT_NAMES = ("inventory", "billing", "weatherapp", "chatbot", "ledger", "scraper", "notifier", "planner")


@family("make_skeleton")
def make_skeleton(rng: random.Random, fail: bool) -> TaskPlan:
    name = rng.choice(PROJECT_NAMES)
    title = name.title()
    files = {"notes.txt": f"todo: start the {name} project\n", "old/legacy.py": "print('legacy')\n"}
    user = rng.choice(
        (
            f"Set up a new Python project folder `{name}` with src/{name}/, tests/ and docs/ inside; put empty __init__.py "
            f"files in src/{name} and tests, and a README.md whose first line is '# {title}'.",
            f"Create the skeleton for {name}: {name}/src/{name}, {name}/tests, {name}/docs, empty __init__.py in the package "
            f"and in tests, and {name}/README.md containing the heading '# {title}'.",
            f"Please scaffold a project called {name} (src layout: src/{name}/__init__.py, tests/__init__.py, a docs folder, "
            f"and a README.md starting with '# {title}').",
        )
    )
    tests = "test" if fail else "tests"
    steps = [Step("ls", say=say(rng, LOOK), alternatives=["ls -1", "ls ."])]
    if rng.random() < 0.25:
        steps.append(Step(f"mkdir {name}/src/{name}", say=say(rng, ACT), expect_rc=1))
    mk = f"mkdir -p {name}/src/{name} {name}/{tests} {name}/docs"
    steps.append(
        Step(
            mk,
            say="Need -p for the parent folders." if len(steps) > 1 else say(rng, ACT),
            alternatives=unless(
                fail,
                [f"mkdir -p {name}/{{src/{name},tests,docs}}", f"mkdir -p {name}/docs {name}/tests {name}/src/{name}"],
            ),
            near_misses=unless(
                fail,
                [
                    (
                        f"mkdir -pv {name}/src/{name} {name}/tests {name}/docs",
                        "creates the same folders but prints each one",
                    )
                ],
            ),
        )
    )
    steps.append(
        Step(
            f"touch {name}/src/{name}/__init__.py {name}/{tests}/__init__.py",
            alternatives=unless(
                fail,
                [
                    f"touch {name}/tests/__init__.py {name}/src/{name}/__init__.py",
                    f": > {name}/src/{name}/__init__.py && : > {name}/tests/__init__.py",
                ],
            ),
        )
    )
    steps.append(
        Step(
            f"echo '# {title}' > {name}/README.md",
            alternatives=[
                f"printf '# {title}\\n' > {name}/README.md",
                f"cat > {name}/README.md <<'EOF'\n# {title}\nEOF",
            ],
            near_misses=[(f"printf '# {title}' > {name}/README.md", "writes the heading without a final newline")],
        )
    )
    steps.append(
        Step(
            f"find {name} | sort",
            label="tree",
            say=say(rng, CHECK),
            alternatives=[f"find {name} -print | sort"],
            near_misses=[(f"find {name} -type f | sort", "lists only the files, not the folders")],
        )
    )
    want = {f"{name}/src/{name}/__init__.py", f"{name}/tests/__init__.py", f"{name}/README.md"}

    def finish(o: Outcome) -> Finish:
        text = rng.choice(
            (
                f"Created {name}/ with src/{name}/__init__.py, tests/__init__.py, docs/ and a README.md titled '# {title}'.",
                f"The {name} skeleton is in place (src/{name}, tests, docs, README.md); see the tree above.",
            )
        )
        ok = (
            want <= set(o.final.files)
            and f"{name}/docs" in o.final.modes
            and o.final.text(f"{name}/README.md") == f"# {title}\n"
        )
        return Finish([text], ok)

    return TaskPlan(
        fixture(files, "/home/user/projects"),
        [Segment(user, steps)],
        finish,
        "created the folder `test` instead of `tests`" if fail else None,
    )


@family("write_config")
def write_config(rng: random.Random, fail: bool) -> TaskPlan:
    port = rng.choice((8000, 8080, 5000, 3000, 8443))
    host = rng.choice(("0.0.0.0", "127.0.0.1"))
    debug = rng.choice(("true", "false"))
    workers = rng.randint(2, 8)
    pairs = [("HOST", host), ("PORT", str(port)), ("DEBUG", debug), ("WORKERS", str(workers))][: rng.randint(3, 4)]
    written = list(pairs)
    if fail:
        written[1] = ("PORT", str(port + 1))
    ignore = rng.choice((".env", "*.log", "node_modules/", ".venv/"))
    files = {
        "app/main.py": "import os\nPORT = int(os.environ.get('PORT', '80'))\n",
        "app/README.md": "# webapp\n",
        "app/.gitignore": "__pycache__/\n*.pyc\n",
    }
    spec = ", ".join(f"{k}={v}" for k, v in pairs)
    user = rng.choice(
        (
            f"Create app/.env with these settings, one per line: {spec}. Also add `{ignore}` to app/.gitignore.",
            f"Please write an env file at app/.env containing {spec} (KEY=VALUE lines), and append {ignore} to the app's .gitignore.",
            f"I need app/.env to define {spec}. And make sure app/.gitignore also ignores {ignore}.",
        )
    )
    body = "".join(f"{k}={v}\\n" for k, v in written)
    echo_chain = " && ".join(f"echo '{k}={v}' {'>' if i == 0 else '>>'} app/.env" for i, (k, v) in enumerate(written))
    heredoc = "cat > app/.env <<'EOF'\n" + "".join(f"{k}={v}\n" for k, v in written) + "EOF"
    steps = [
        Step(
            "ls -A app",
            say=say(rng, LOOK),
            alternatives=["ls -A app/", "ls --almost-all app"],
            near_misses=[("ls app", "hides the dot files such as .gitignore")],
        ),
        Step("cat app/.gitignore", alternatives=["cat ./app/.gitignore"]),
        Step(f"printf '{body}' > app/.env", say=say(rng, ACT), alternatives=unless(fail, [heredoc, echo_chain])),
        Step(
            f"echo '{ignore}' >> app/.gitignore",
            alternatives=[f"printf '{ignore}\\n' >> app/.gitignore"],
            near_misses=[(f"echo '{ignore}' > app/.gitignore", "overwrites .gitignore instead of appending")],
        ),
        Step(
            "cat app/.env app/.gitignore",
            label="show",
            say=say(rng, CHECK),
            alternatives=["cat app/.env; cat app/.gitignore", "cat app/.env && cat app/.gitignore"],
        ),
    ]
    expected = "".join(f"{k}={v}\n" for k, v in pairs)

    def finish(o: Outcome) -> Finish:
        text = rng.choice(
            (
                f"app/.env now sets {spec}, and {ignore} is appended to app/.gitignore.",
                f"Done: wrote {len(pairs)} settings to app/.env and added {ignore} to .gitignore.",
            )
        )
        ok = o.final.text("app/.env") == expected and (o.final.text("app/.gitignore") or "").endswith(f"{ignore}\n")
        return Finish([text], ok)

    return TaskPlan(
        fixture(files, "/srv/webapp"),
        [Segment(user, steps)],
        finish,
        f"wrote PORT={port + 1} instead of PORT={port}" if fail else None,
    )


# --------------------------------------------------------------------------- sed

INI_TEMPLATE = """[database]
host = {old}
port = 5432
name = shop
url = postgresql://app@{old}:5432/shop?fallback={old}

[replica]
host = {old}
readonly = true
"""


@family("sed_replace")
def sed_replace(rng: random.Random, fail: bool) -> TaskPlan:
    old = rng.choice(("localhost", "127.0.0.1", "db-old.lan"))
    new = rng.choice(("db.internal", "10.1.2.3", "postgres.prod.lan"))
    target = "config/database.ini"
    files = {
        target: INI_TEMPLATE.format(old=old),
        "config/cache.ini": f"[cache]\nhost = {old}\nttl = 300\n",
        "config/app.ini": "[app]\nname = shop\ndebug = false\n",
    }
    user = rng.choice(
        (
            f"In {target}, replace every occurrence of {old} with {new}. Leave the other config files alone.",
            f"We moved the database. Please change all `{old}` entries to `{new}` in {target} only.",
            f"Update {target}: swap {old} for {new} everywhere in that file (there may be several per line).",
        )
    )
    o_re, n_re = old.replace(".", "\\."), new
    flags = "" if fail else "g"
    steps = [
        Step(
            f"grep -rn '{old}' config | sort",
            say=say(rng, LOOK),
            alternatives=[f"grep -nr '{old}' config | sort", f"grep -rn -F '{old}' config | sort"],
        ),
        Step(
            f"sed -i 's/{o_re}/{n_re}/{flags}' {target}",
            say=say(rng, ACT),
            alternatives=unless(
                fail,
                [
                    f"sed -i -e 's/{o_re}/{n_re}/g' {target}",
                    f"sed -i 's|{o_re}|{n_re}|g' {target}",
                    f"sed --in-place 's/{o_re}/{n_re}/g' {target}",
                ],
            ),
            near_misses=unless(
                fail,
                [
                    (f"sed 's/{o_re}/{n_re}/g' {target}", "prints the edited text but leaves the file unchanged"),
                    (
                        f"sed -i 's/{o_re}/{n_re}/g' config/*.ini",
                        "also edits cache.ini, which the user wanted left alone",
                    ),
                ],
            ),
        ),
        Step(
            f"grep -n '{new}' {target}",
            label="new",
            say=say(rng, CHECK),
            alternatives=[f"grep -nF '{new}' {target}", f"grep -n -- '{new}' {target}"],
        ),
        Step(f"grep -c '{old}' {target}", label="left", expect_rc=None, alternatives=[f"grep -cF '{old}' {target}"]),
    ]

    def finish(o: Outcome) -> Finish:
        n = len(lines_of(o.outputs["new"]))
        text = rng.choice(
            (
                f"Replaced {old} with {new} in {target}; {plural(n, 'line')} now point at {new} and cache.ini is untouched.",
                f"{target} updated: every {old} is now {new} ({plural(n, 'line')} changed).",
            )
        )
        ok = old not in (o.final.text(target) or "") and old in (o.final.text("config/cache.ini") or "")
        return Finish([text], ok)

    return TaskPlan(
        fixture(files, "/opt/service"),
        [Segment(user, steps)],
        finish,
        "ran sed without the g flag, so the second occurrence on the url line was kept" if fail else None,
    )


@family("rename_symbol")
def rename_symbol(rng: random.Random, fail: bool) -> TaskPlan:
    old, new = rng.choice(
        (
            ("get_user", "fetch_user"),
            ("load_cfg", "load_config"),
            ("calc_total", "compute_total"),
            ("send_mail", "send_email"),
        )
    )
    mods = rng.sample(("api", "views", "jobs", "cli", "models"), 3)
    files = {
        f"src/{mods[0]}.py": f"def {old}(key):\n    return DB[key]\n",
        f"src/{mods[1]}.py": f"from .{mods[0]} import {old}\n\n\ndef show(k):\n    return {old}(k) or {old}(k.lower())\n",
        f"src/{mods[2]}.py": f"from .{mods[0]} import {old}\n\n\ndef run():\n    {old}('admin')\n",
        "docs/notes.md": f"`{old}` is being renamed.\n",
    }
    user = rng.choice(
        (
            f"Rename the function {old} to {new} in every Python file under src/. Don't touch the docs.",
            f"Please replace all uses of `{old}` with `{new}` across src/*.py.",
            f"Refactor: {old} -> {new} in the source files (src/), everywhere it appears.",
        )
    )
    glob = f"src/{mods[0]}.py src/{mods[2]}.py" if fail else "src/*.py"
    steps = [
        Step(
            f"grep -rn {old} src | sort",
            label="before",
            say=say(rng, LOOK),
            alternatives=[f"grep -nr {old} src | sort", f"grep -rn '{old}' src/ | sort"],
        ),
        Step(
            f"sed -i 's/{old}/{new}/g' {glob}",
            say=say(rng, ACT),
            alternatives=unless(
                fail,
                [
                    f"find src -name '*.py' -exec sed -i 's/{old}/{new}/g' {{}} +",
                    f"sed -i -e 's/{old}/{new}/g' src/*.py",
                ],
            ),
            near_misses=unless(
                fail, [(f"sed -i 's/{old}/{new}/' src/*.py", "without g only the first use on each line is renamed")]
            ),
        ),
        Step(
            f"grep -rn {new} src | sort",
            label="after",
            say=say(rng, CHECK),
            alternatives=[f"grep -nr {new} src | sort"],
        ),
        Step(
            f"grep -rc {old} src | sort", label="left", expect_rc=None, alternatives=[f"grep -c {old} src/*.py | sort"]
        ),
    ]

    def finish(o: Outcome) -> Finish:
        n = len(lines_of(o.outputs["after"]))
        text = rng.choice(
            (
                f"Renamed {old} to {new} in src/ ({plural(n, 'line')} now use {new}); docs/notes.md is unchanged.",
                f"All occurrences of {old} in the Python sources are now {new}.",
            )
        )
        ok = all(old not in (o.final.text(f"src/{m}.py") or "") for m in mods) and old in (
            o.final.text("docs/notes.md") or ""
        )
        return Finish([text], ok)

    return TaskPlan(
        fixture(files, "/workspace/app"),
        [Segment(user, steps)],
        finish,
        f"edited only two of the three modules and missed src/{mods[1]}.py" if fail else None,
    )


# --------------------------------------------------------------------------- permissions


@family("permissions")
def permissions(rng: random.Random, fail: bool) -> TaskPlan:
    scripts = sorted(
        rng.sample(("deploy", "backup", "cleanup", "rotate_logs", "healthcheck", "migrate"), rng.randint(2, 4))
    )
    key = rng.choice(("config/secret.key", "config/api_token", "config/db_password"))
    files = {f"scripts/{s}.sh": f"#!/bin/sh\necho running {s}\n" for s in scripts}
    files["scripts/README.txt"] = "Helper scripts. Run from the repository root.\n"
    files[key] = "s3cr3t-value\n"
    user = rng.choice(
        (
            f"Make every .sh script in scripts/ executable, and restrict {key} so only its owner can read and write it (600).",
            f"The scripts in scripts/*.sh can't be run: fix their permissions (755). Also lock {key} down to mode 600.",
            f"Please chmod the shell scripts under scripts/ to be executable by everyone, and make {key} owner-only (rw-------).",
        )
    )
    key_mode = "640" if fail else "600"
    steps = stumble(rng, "chmod +x scripts/*.bash", 1, "Making the scripts executable first.")
    steps += [
        Step(
            "ls scripts config",
            say="No .bash files; let me see the real names." if steps else say(rng, LOOK),
            alternatives=["ls config scripts", "ls -1 scripts config"],
        ),
        Step(
            f"stat -c '%a %n' scripts/* {key}",
            say="Current modes:",
            alternatives=[f"stat --format='%a %n' scripts/* {key}", f'stat -c "%a %n" scripts/* {key}'],
            near_misses=[(f"stat scripts/* {key}", "full stat output with times and inodes")],
        ),
        Step(
            "chmod +x scripts/*.sh",
            say=say(rng, ACT),
            alternatives=["chmod a+x scripts/*.sh", "chmod 755 scripts/*.sh", "chmod ugo+x scripts/*.sh"],
            near_misses=[
                ("chmod u+x scripts/*.sh", "only the owner gets the execute bit (744)"),
                ("chmod +x scripts/*", "also makes README.txt executable"),
            ],
        ),
        Step(
            f"chmod {key_mode} {key}",
            alternatives=unless(fail, [f"chmod u=rw,go= {key}", f"chmod go-rwx {key}"]),
            near_misses=unless(fail, [(f"chmod 400 {key}", "also removes the owner's write permission")]),
        ),
        Step(
            f"stat -c '%a %n' scripts/* {key}",
            label="modes",
            say=say(rng, CHECK),
            alternatives=[f"stat --format='%a %n' scripts/* {key}"],
        ),
    ]
    segments = [Segment(user, steps)]
    if rng.random() < 0.3:
        segments.append(
            Segment(
                rng.choice(
                    ("Which files under scripts/ are executable now?", "Can you list the executable files in scripts/?")
                ),
                [
                    Step(
                        "find scripts -type f -perm -u+x | sort",
                        label="exec",
                        say=say(rng, CHECK),
                        alternatives=[
                            "find scripts -type f -perm /111 | sort",
                            "find scripts -perm -u=x -type f | sort",
                        ],
                        near_misses=[("ls scripts", "lists every file, executable or not")],
                    )
                ],
            )
        )

    def finish(o: Outcome) -> Finish:
        text = rng.choice(
            (
                f"The {plural(len(scripts), 'script')} in scripts/ are now 755 and {key} is {key_mode}, as the stat output shows.",
                f"Done: scripts/*.sh are executable (755) and {key} is owner-only ({key_mode}).",
            )
        )
        m = o.final.modes
        ok = (
            all(m.get(f"scripts/{s}.sh") == 0o755 for s in scripts)
            and m.get(key) == 0o600
            and m.get("scripts/README.txt") == 0o644
        )
        texts = [text]
        if len(segments) > 1:
            texts.append("Executable now: " + join_words(lines_of(o.outputs["exec"])) + ".")
        return Finish(texts, ok)

    return TaskPlan(
        fixture(files, "/opt/tools"),
        segments,
        finish,
        f"set {key} to 640, which still lets the group read it" if fail else None,
    )


# --------------------------------------------------------------------------- tar


@family("tar_create")
def tar_create(rng: random.Random, fail: bool) -> TaskPlan:
    logs = sorted(rng.sample(("app.log", "worker.log", "access.log", "cron.log", "mail.log"), rng.randint(2, 4)))
    files = {f"logs/{name}": "\n".join(make_log(rng, rng.randint(3, 6), 10, {})) + "\n" for name in logs}
    files["logs/old/2023.log"] = "archived\n"
    files["data/users.csv"] = "id,name\n1,ann\n"
    archive = rng.choice(("backups/logs.tar.gz", "backups/logs-archive.tar.gz", "archive/logs.tgz"))
    folder = archive.split("/")[0]
    remove = rng.random() < 0.4
    user = rng.choice(
        (
            f"Pack the whole logs/ folder into a gzipped tarball at {archive}"
            + (" and then delete the original logs/ folder." if remove else "."),
            f"Back up logs/ as {archive} (tar + gzip), then show me what's inside"
            + ("; remove logs/ afterwards." if remove else "."),
            f"Create a compressed archive {archive} containing the logs directory"
            + (", and clean up logs/ once it's archived." if remove else "."),
        )
    )
    c = "-cf" if fail else "-czf"
    steps = [
        Step(
            "ls -R logs",
            say=say(rng, LOOK),
            near_misses=[("ls -R logs/", "same listing, but the headers read 'logs/:'")],
        ),
        Step(
            f"mkdir -p {folder} && tar {c} {archive} logs",
            say=say(rng, ACT),
            alternatives=unless(
                fail, [f"mkdir -p {folder} && tar czf {archive} logs/", f"mkdir -p {folder}; tar -zcf {archive} logs"]
            ),
            near_misses=unless(
                fail,
                [
                    (
                        f"mkdir -p {folder} && tar -czvf {archive} logs",
                        "creates the same archive but lists every file while doing so",
                    )
                ],
            ),
        ),
        Step(
            f"tar -tf {archive} | sort",
            label="list",
            say=say(rng, CHECK),
            alternatives=[f"tar tf {archive} | sort"]
            if fail
            else [f"tar -tzf {archive} | sort", f"tar tzf {archive} | sort"],
        ),
    ]
    if remove:
        steps.append(
            Step(
                "rm -r logs",
                alternatives=["rm -rf logs", "rm -rf logs/"],
                near_misses=[("rm -r logs/*", "empties logs/ but keeps the folder")],
            )
        )
        steps.append(Step("ls", alternatives=["ls -1", "ls ."]))

    def finish(o: Outcome) -> Finish:
        n = len([x for x in lines_of(o.outputs["list"]) if not x.endswith("/")])
        text = rng.choice(
            (
                f"Created {archive} with {plural(n, 'file')} from logs/"
                + (" and removed the original folder." if remove else "."),
                f"{archive} is ready ({n} files, gzip-compressed)" + ("; logs/ has been deleted." if remove else "."),
            )
        )
        data = o.final.files.get(archive, b"")
        ok = data[:2] == b"\x1f\x8b" and (("logs/app.log" not in o.final.files) if remove else True)
        return Finish([text], ok)

    return TaskPlan(
        fixture(files, "/home/user/site"),
        [Segment(user, steps)],
        finish,
        "forgot the z flag: the .tar.gz file is an uncompressed tar" if fail else None,
    )


@family("tar_extract")
def tar_extract(rng: random.Random, fail: bool) -> TaskPlan:
    version = f"{rng.randint(1, 3)}.{rng.randint(0, 9)}.{rng.randint(0, 20)}"
    bundle = f"app-{version}.tar.gz"
    dest = rng.choice(("deploy", "releases/current", "opt"))
    files = {
        "release/VERSION": version + "\n",
        "release/bin/run.sh": "#!/bin/sh\nexec python -m app\n",
        "release/config/settings.ini": f"[app]\nversion = {version}\nworkers = {rng.randint(2, 8)}\n",
        "release/README.md": "# app release\n",
        "notes.txt": "deploy steps: extract, check VERSION\n",
    }
    setup = f"chmod 755 release/bin/run.sh\ntar -czf {bundle} release && rm -r release"
    user = rng.choice(
        (
            f"Unpack {bundle} into {dest}/ and tell me which version it contains (see the VERSION file).",
            f"Extract the release bundle {bundle} under {dest} and confirm the version number.",
            f"Please extract {bundle} into the {dest} directory (create it) and read back the VERSION.",
        )
    )
    steps = [
        Step("ls", say=say(rng, LOOK), alternatives=["ls -1", "ls ."]),
        Step(
            f"tar -tzf {bundle} | sort",
            say="What's inside the archive:",
            alternatives=[f"tar tzf {bundle} | sort", f"tar -tf {bundle} | sort"],
            near_misses=[(f"tar -tzvf {bundle}", "verbose listing with owners and times")],
        ),
    ]
    if rng.random() < 0.25:
        steps.append(Step(f"tar -xzf {bundle} -C {dest}", say=say(rng, ACT), expect_rc=2))
    if fail:
        steps.append(Step(f"mkdir -p {dest} && tar -xzf {bundle}", say=say(rng, ACT)))
        show = "find release -type f | sort"
        read = "cat release/VERSION"
    else:
        steps.append(
            Step(
                f"mkdir -p {dest} && tar -xzf {bundle} -C {dest}",
                say="The target folder has to exist first." if len(steps) > 2 else say(rng, ACT),
                alternatives=[
                    f"mkdir -p {dest} && tar xzf {bundle} -C {dest}",
                    f"mkdir -p {dest} && tar -C {dest} -xzf {bundle}",
                    f"mkdir -p {dest} && cd {dest} && tar -xzf {'../' * (dest.count('/') + 1)}{bundle}",
                ],
                near_misses=[
                    (f"mkdir -p {dest} && tar -xzvf {bundle} -C {dest}", "extracts the same files but lists them")
                ],
            )
        )
        show = f"find {dest} -type f | sort"
        read = f"cat {dest}/release/VERSION"
    steps.append(Step(show, say=say(rng, CHECK), alternatives=[show.replace("-type f |", "-type f -print |")]))
    steps.append(Step(read, label="version", alternatives=[read.replace("cat", "head -n 1")]))

    def finish(o: Outcome) -> Finish:
        v = o.outputs["version"].strip()
        text = rng.choice(
            (
                f"Extracted {bundle} into {dest}/; it contains version {v}.",
                f"The bundle is unpacked under {dest}/release and VERSION reads {v}.",
            )
        )
        return Finish([text], o.final.text(f"{dest}/release/VERSION") == version + "\n")

    return TaskPlan(
        fixture(files, "/opt/app", setup),
        [Segment(user, steps)],
        finish,
        f"extracted into the current directory instead of {dest}/ (no -C)" if fail else None,
    )


# --------------------------------------------------------------------------- words, diff, grep, sort


def make_text(rng: random.Random, n_lines: int) -> tuple[str, list[str]]:
    """Lower-case text with single spaces; its 3 most common words have distinct counts above the rest."""
    while True:
        lines = [" ".join(rng.choices(WORDS, k=rng.randint(6, 11))) for _ in range(n_lines)]
        counts: dict[str, int] = {}
        for w in " ".join(lines).split():
            counts[w] = counts.get(w, 0) + 1
        ranked = sorted(counts.values(), reverse=True)
        if len(ranked) > 3 and ranked[0] > ranked[1] > ranked[2] > ranked[3]:
            top = sorted(counts, key=lambda w: -counts[w])[:3]
            return "\n".join(lines) + "\n", top


@family("word_count")
def word_count(rng: random.Random, fail: bool) -> TaskPlan:
    essay, top = make_text(rng, rng.randint(7, 12))
    notes, _ = make_text(rng, rng.randint(3, 6))
    name = rng.choice(("essay.txt", "chapter1.txt", "draft.txt"))
    files = {f"docs/{name}": essay, "docs/notes.txt": notes, "docs/outline.md": "# outline\n- intro\n- body\n"}
    target = "docs/notes.txt" if fail else f"docs/{name}"
    steps = stumble(rng, f"wc -w {name}", 1, "Counting right away.")
    steps += [
        Step(
            "ls docs",
            say="Not at the top level; the docs folder then." if steps else say(rng, LOOK),
            alternatives=["ls docs/", "ls -1 docs"],
        ),
        Step(f"head -n 3 {target}", say=say(rng, PEEK), alternatives=[f"head -3 {target}", f"sed -n '1,3p' {target}"]),
    ]
    if rng.random() < 0.5:
        user = rng.choice(
            (
                f"How many words and lines does docs/{name} have?",
                f"Give me the word count of docs/{name} (and the number of lines).",
                f"Count the words in docs/{name}, please. Lines too.",
            )
        )
        steps.append(
            Step(
                f"wc -w < {target}",
                label="words",
                say=say(rng, QUERY),
                alternatives=unless(fail, [f"cat {target} | wc -w", f"wc --words < {target}"]),
                near_misses=unless(
                    fail,
                    [
                        (f"wc -w {target}", "prints the file name after the count"),
                        (f"wc -l < {target}", "counts lines, not words"),
                    ],
                ),
            )
        )
        steps.append(
            Step(
                f"wc -l < {target}",
                label="lines",
                alternatives=unless(fail, [f"cat {target} | wc -l", f"grep -c '' {target}"]),
            )
        )
        truth = len(essay.split())
        segments = [Segment(user, steps)]
        # a word used twice on one line tells "occurrences" from "lines with the word"
        twice = sorted({w for line in essay.splitlines() for w in line.split() if line.split().count(w) > 1})
        word = rng.choice(twice or sorted(set(essay.split())))
        if rng.random() < 0.35:
            segments.append(
                Segment(
                    rng.choice(
                        (f"And how many times does the word '{word}' occur in it?", f"How often is '{word}' used?")
                    ),
                    [
                        Step(
                            f"grep -ow {word} {target} | wc -l",
                            label="word",
                            say=say(rng, QUERY),
                            alternatives=[
                                f"tr -s ' ' '\\n' < {target} | grep -cx {word}",
                                f"grep -o '\\b{word}\\b' {target} | wc -l",
                            ],
                            near_misses=[
                                (f"grep -cw {word} {target}", "counts lines containing the word, not occurrences")
                            ]
                            if twice and not fail
                            else [],
                        )
                    ],
                )
            )

        def finish(o: Outcome) -> Finish:
            w, n = first_int(o.outputs["words"]), first_int(o.outputs["lines"])
            texts = [rng.choice((f"docs/{name} has {w} words on {n} lines.", f"Word count: {w} ({n} lines)."))]
            if len(segments) > 1:
                k = first_int(o.outputs["word"])
                texts.append(f"'{word}' occurs {plural(k or 0, 'time')}.")
            return Finish(texts, w == truth)

        return TaskPlan(
            fixture(files, "/home/user/writing"),
            segments,
            finish,
            f"counted docs/notes.txt instead of docs/{name}" if fail else None,
        )

    user = rng.choice(
        (
            f"What are the three most frequent words in docs/{name}, with their counts?",
            f"Find the top 3 words by frequency in docs/{name}.",
            f"Which words appear most often in docs/{name}? I need the top three and how many times each occurs.",
        )
    )
    pipe = "uniq -c" if fail else "sort | uniq -c"
    steps.append(
        Step(
            f"tr -s ' ' '\\n' < docs/{name} | {pipe} | sort -rn | head -n 3",
            label="top",
            say=say(rng, QUERY),
            alternatives=unless(
                fail,
                [
                    f"grep -oE '[a-z]+' docs/{name} | sort | uniq -c | sort -rn | head -n 3",
                    f"tr ' ' '\\n' < docs/{name} | sort | uniq -c | sort -rn | head -3",
                ],
            ),
            near_misses=unless(
                fail,
                [
                    (
                        f"tr -s ' ' '\\n' < docs/{name} | uniq -c | sort -rn | head -n 3",
                        "uniq without sort only merges adjacent repeats",
                    )
                ],
            ),
        )
    )

    def finish_top(o: Outcome) -> Finish:
        table = counts_table(o.outputs["top"])
        listing = join_words([f"'{w}' ({n})" for n, w in table])
        text = rng.choice((f"The three most frequent words are {listing}.", f"Top words in docs/{name}: {listing}."))
        return Finish([text], [w for _, w in table] == top)

    return TaskPlan(
        fixture(files, "/home/user/writing"),
        [Segment(user, steps)],
        finish_top,
        "piped into uniq -c without sorting first, so repeated words were not merged" if fail else None,
    )


CONF_WORDS = {
    "log_level": ("info", "debug", "warn"),
    "gzip": ("on", "off"),
    "cache": ("on", "off"),
    "user": ("www", "nginx", "app"),
    "root": ("/var/www", "/srv/site", "/opt/app/public"),
}
CONF_NUMBERS = {
    "listen": (80, 8080),
    "workers": (1, 16),
    "timeout": (5, 120),
    "max_body": (1, 64),
    "keepalive": (10, 90),
}


def make_conf(rng: random.Random) -> dict[str, str]:
    """A ``key = value`` config: 7-9 settings with plausible values."""
    keys = rng.sample(sorted(CONF_WORDS) + sorted(CONF_NUMBERS), rng.randint(7, 9))
    return {k: rng.choice(CONF_WORDS[k]) if k in CONF_WORDS else str(rng.randint(*CONF_NUMBERS[k])) for k in keys}


def render_conf(conf: dict[str, str]) -> str:
    return "".join(f"{k} = {v}\n" for k, v in conf.items())


def changed(rng: random.Random, conf: dict[str, str], k: int) -> dict[str, str]:
    """``conf`` with ``k`` settings changed (numbers bumped, words switched)."""
    out = dict(conf)
    for key in rng.sample(list(conf), k):
        if key in CONF_WORDS:
            out[key] = rng.choice([w for w in CONF_WORDS[key] if w != conf[key]])
        else:
            out[key] = str(int(conf[key]) + rng.randint(1, 9))
    return out


@family("diff_compare")
def diff_compare(rng: random.Random, fail: bool) -> TaskPlan:
    name = rng.choice(("app.conf", "server.conf", "worker.conf"))
    orig = make_conf(rng)
    new = changed(rng, orig, rng.randint(1, 3))
    bak = changed(rng, orig, 1)
    while bak == new:
        bak = changed(rng, orig, 1)
    files = {
        f"config/{name}.orig": render_conf(orig),
        f"config/{name}": render_conf(new),
        f"config/{name}.bak": render_conf(bak),
    }
    patch = f"{name}.diff"
    user = rng.choice(
        (
            f"What changed between config/{name}.orig and config/{name}? Save the differences to {patch} too.",
            f"Compare the original config/{name}.orig with the current config/{name}, summarise the changes and write the diff to {patch}.",
            f"Please diff config/{name}.orig against config/{name}, store the output in {patch} and tell me which settings differ.",
        )
    )
    a = f"config/{name}.bak" if fail else f"config/{name}.orig"
    b = f"config/{name}"
    steps = stumble(rng, f"diff {name}.orig {name}", 2, say(rng, QUERY))
    steps += [
        Step(
            "ls config",
            say="The files are in config/." if steps else say(rng, LOOK),
            alternatives=["ls config/", "ls -1 config"],
        ),
        Step(
            f"diff {a} {b}",
            label="diff",
            say=say(rng, QUERY),
            expect_rc=1,
            alternatives=unless(fail, [f"diff -- {a} {b}", f"cat {a} | diff - {b}"]),
            near_misses=unless(
                fail,
                [
                    (f"diff {b} {a}", "compares in the other direction: < and > swap"),
                    (f"diff -u {a} {b}", "unified format with file headers"),
                    (f"diff {a} {b} | cat", "same text but the exit status is 0"),
                ],
            ),
        ),
        Step(
            f"diff {a} {b} > {patch}",
            expect_rc=1,
            say=rng.choice(("Saving it:", None)),
            alternatives=unless(fail, [f"diff -- {a} {b} > {patch}", f"diff {a} - < {b} > {patch}"]),
        ),
        Step(
            f"wc -l < {patch}",
            say=say(rng, CHECK),
            alternatives=[f"cat {patch} | wc -l"],
            near_misses=[(f"wc -l {patch}", "prints the file name after the count")],
        ),
    ]
    truth = sorted(k for k in orig if orig[k] != new[k])
    segments = [Segment(user, steps)]
    if rng.random() < 0.3:
        segments.append(
            Segment(
                rng.choice(
                    (
                        f"Thanks. Actually, please put config/{name} back to the original version.",
                        f"OK, revert config/{name} to match {name}.orig exactly.",
                    )
                ),
                [
                    Step(
                        f"cp config/{name}.orig config/{name}",
                        say=say(rng, ACT),
                        alternatives=[
                            f"cat config/{name}.orig > config/{name}",
                            f"cp -f config/{name}.orig config/{name}",
                        ],
                        near_misses=[(f"mv config/{name}.orig config/{name}", "also removes the .orig file")],
                    ),
                    Step(
                        f"diff config/{name}.orig config/{name} && echo identical",
                        label="same",
                        say=say(rng, CHECK),
                        alternatives=[
                            f"cmp config/{name}.orig config/{name} && echo identical",
                            f"cmp -s config/{name}.orig config/{name} && echo identical",
                        ],
                    ),
                ],
            )
        )

    def finish(o: Outcome) -> Finish:
        olds = {
            ln[2:].split(" = ")[0]: ln[2:].split(" = ")[1] for ln in lines_of(o.outputs["diff"]) if ln.startswith("< ")
        }
        news = {
            ln[2:].split(" = ")[0]: ln[2:].split(" = ")[1] for ln in lines_of(o.outputs["diff"]) if ln.startswith("> ")
        }
        keys = sorted(set(olds) | set(news))
        desc = join_words([f"{k} ({olds.get(k, '-')} -> {news.get(k, '-')})" for k in keys])
        texts = [
            rng.choice(
                (
                    f"{plural(len(keys), 'setting')} changed: {desc}. The diff is saved in {patch}.",
                    f"Differences: {desc}. I wrote the full diff to {patch}.",
                )
            )
        ]
        if len(segments) > 1:
            texts.append(f"config/{name} is back to the original; diff reports them {o.outputs['same'].strip()}.")
        return Finish(texts, keys == truth)

    return TaskPlan(
        fixture(files, "/home/user/config"),
        segments,
        finish,
        f"compared the .bak copy instead of {name}.orig with the current file" if fail else None,
    )


@family("grep_todo")
def grep_todo(rng: random.Random, fail: bool) -> TaskPlan:
    mods = [
        "src/app/main.py",
        "src/app/utils.py",
        "src/app/db/models.py",
        "src/app/db/queries.py",
        "src/app/web/routes.py",
    ]
    notes = (
        "handle timeouts",
        "add caching",
        "validate input",
        "remove debug print",
        "paginate results",
        "use a transaction",
        "log failures",
    )
    with_todo = set(rng.sample(mods[:2], 1) + rng.sample(mods[2:], 2))
    files, total = {}, 0
    for m in mods:
        body = [f'"""{m.rsplit("/", 1)[1]}"""', "", "def run():"]
        if m in with_todo:
            for _ in range(rng.randint(1, 2)):
                body.append(f"    # TODO: {rng.choice(notes)}")
                total += 1
        body.append("    return None")
        files[m] = "\n".join(body) + "\n"
    files["README.md"] = "# app\nSee the TODO list in the issue tracker.\n"
    found = sorted(with_todo)
    shallow = "src/app/*.py"
    user = rng.choice(
        (
            "Which Python files under src/ still contain TODO comments, and how many TODOs are there in total?",
            "List every source file in src/ with a TODO in it, and count the TODOs.",
            "Find the leftover TODOs in the code under src/ (all subpackages): which files, and how many overall?",
        )
    )
    steps = stumble(rng, "grep -rl TODO source", 2, say(rng, LOOK))
    steps += [
        Step(
            "find src -name '*.py' | sort",
            say="The folder is src/, not source/." if steps else say(rng, LOOK),
            alternatives=["find src -type f -name '*.py' | sort", 'find src -name "*.py" | sort'],
        )
    ]
    if fail:
        steps.append(Step(f"grep -l TODO {shallow}", label="files", say=say(rng, QUERY)))
        steps.append(Step(f"grep TODO {shallow} | wc -l", label="count"))
    else:
        steps.append(
            Step(
                "grep -rl TODO src | sort",
                label="files",
                say=say(rng, QUERY),
                alternatives=["grep -lr TODO src | sort", "grep -rl 'TODO' src/ | sort"],
                near_misses=[
                    (f"grep -l TODO {shallow}", "misses the files in the subpackages"),
                    ("grep -rc TODO src | sort", "prints a count for every file, including zeros"),
                ],
            )
        )
        steps.append(
            Step(
                "grep -r TODO src | wc -l",
                label="count",
                say=rng.choice(("And the total:", None)),
                alternatives=[
                    "grep -rh TODO src | wc -l",
                    "grep -ro TODO src | wc -l",
                    "cat $(grep -rl TODO src) | grep -c TODO",
                ],
            )
        )
    steps.append(
        Step(
            "grep -rn TODO src | sort",
            say="The TODOs themselves:" if rng.random() < 0.5 else None,
            alternatives=["grep -nr TODO src | sort"],
        )
    )
    segments = [Segment(user, steps)]
    if rng.random() < 0.3:
        scope = f"-n TODO {shallow}" if fail else "-rn TODO src"
        segments.append(
            Segment(
                rng.choice(
                    (
                        "Please save that list (file:line: text) to todo.txt as well.",
                        "Could you write those TODO lines into todo.txt, with file names and line numbers?",
                    )
                ),
                [
                    Step(
                        f"grep {scope} | sort > todo.txt",
                        say=say(rng, ACT),
                        alternatives=unless(
                            fail, ["grep -nr TODO src | sort > todo.txt", "grep -rn TODO src | sort -o todo.txt"]
                        ),
                    ),
                    Step("wc -l < todo.txt", label="saved", say=say(rng, CHECK), alternatives=["cat todo.txt | wc -l"]),
                ],
            )
        )

    def finish(o: Outcome) -> Finish:
        listed = lines_of(o.outputs["files"])
        n = first_int(o.outputs["count"]) or 0
        texts = [
            rng.choice(
                (
                    f"{plural(n, 'TODO')} in {plural(len(listed), 'file')}: {join_words(listed)}.",
                    f"Files with TODOs: {join_words(listed)} ({n} in total).",
                )
            )
        ]
        if len(segments) > 1:
            texts.append(f"Saved {plural(first_int(o.outputs['saved']) or 0, 'line')} to todo.txt.")
        return Finish(texts, listed == found and n == total)

    return TaskPlan(
        fixture(files, "/home/user/code"),
        segments,
        finish,
        "searched only src/app/*.py, not recursively, and missed the subpackages" if fail else None,
    )


@family("sort_dedupe")
def sort_dedupe(rng: random.Random, fail: bool) -> TaskPlan:
    kind = rng.choice(("emails", "hosts"))
    if kind == "emails":
        pool = [f"{f}@{rng.choice(('example.com', 'mail.test', 'corp.example'))}" for f in rng.sample(FIRST, 10)]
    else:
        pool = [f"{rng.choice(('web', 'db', 'cache', 'mq'))}{i}.lan" for i in rng.sample(range(1, 30), 10)]
    while True:
        items = [rng.choice(pool) for _ in range(rng.randint(14, 24))]
        nonadjacent = any(items[i] in items[: i - 1] for i in range(2, len(items)))
        if len(set(items)) < len(items) and nonadjacent:
            break
    src, dst = f"lists/{kind}.txt", f"lists/{kind}_unique.txt"
    files = {src: "\n".join(items) + "\n", "lists/README": f"{kind}.txt is exported nightly; it has duplicates.\n"}
    user = rng.choice(
        (
            f"Make a sorted, de-duplicated copy of {src} at {dst}. How many unique entries are there?",
            f"{src} has duplicates. Write the unique entries, sorted, to {dst} and tell me how many there were before and after.",
            f"Please dedupe {src} (sorted output into {dst}) and report the counts.",
        )
    )
    act = f"uniq {src} > {dst}" if fail else f"sort -u {src} > {dst}"
    steps = [
        Step(
            f"wc -l < {src}",
            label="before",
            say=say(rng, LOOK),
            alternatives=[f"cat {src} | wc -l", f"grep -c '' {src}"],
            near_misses=[(f"wc -l {src}", "prints the file name after the count")],
        ),
        Step(f"head -n 5 {src}", say=say(rng, PEEK), alternatives=[f"head -5 {src}", f"sed -n '1,5p' {src}"]),
        Step(
            act,
            say=say(rng, ACT),
            alternatives=unless(
                fail, [f"sort {src} | uniq > {dst}", f"sort -u -o {dst} {src}", f"sort -u < {src} > {dst}"]
            ),
            near_misses=unless(
                fail,
                [
                    (f"sort {src} > {dst}", "sorts but keeps the duplicates"),
                    (f"sort -u {src}", "prints the result instead of writing the file"),
                ],
            ),
        ),
        Step(f"wc -l < {dst}", label="after", say=say(rng, CHECK), alternatives=[f"cat {dst} | wc -l"]),
        Step(f"cat {dst}", alternatives=[f"sed -n p {dst}"]),
    ]
    uniq_sorted = sorted(set(items))
    segments = [Segment(user, steps)]
    if rng.random() < 0.3:
        if kind == "emails":
            part = rng.choice(sorted({i.split("@")[1] for i in items}))
            ask, pattern = f"How many of the unique addresses are at {part}?", f"'@{part}$'"
        else:
            part = rng.choice(sorted({re.match(r"[a-z]+", i).group() for i in items}))  # type: ignore[union-attr]
            ask, pattern = (
                f"How many of the unique hosts are {part} servers (names starting with {part})?",
                f"'^{part}'",
            )
        segments.append(
            Segment(
                ask,
                [
                    Step(
                        f"grep -c {pattern} {dst}",
                        label="part",
                        say=say(rng, QUERY),
                        alternatives=[f"grep {pattern} {dst} | wc -l", f"grep -e {pattern} -c {dst}"],
                        near_misses=[(f"grep -c {pattern} {src}", "counts in the list with duplicates")],
                    )
                ],
            )
        )

    def finish(o: Outcome) -> Finish:
        before, after = first_int(o.outputs["before"]), first_int(o.outputs["after"])
        texts = [
            rng.choice(
                (
                    f"{dst} holds {after} unique entries, sorted (down from {before} lines).",
                    f"Deduplicated: {before} lines -> {after} unique ones, written in sorted order to {dst}.",
                )
            )
        ]
        if len(segments) > 1:
            texts.append(f"{first_int(o.outputs['part'])} of the entries in {dst} match.")
        return Finish(texts, (o.final.text(dst) or "").splitlines() == uniq_sorted)

    return TaskPlan(
        fixture(files, "/home/user/lists"),
        segments,
        finish,
        "ran uniq without sorting first, so non-adjacent duplicates survived" if fail else None,
    )


@family("project_cleanup")
def project_cleanup(rng: random.Random, fail: bool) -> TaskPlan:
    pkg = rng.choice(("mylib", "toolkit", "core", "engine"))
    src = [
        f"{pkg}/__init__.py",
        f"{pkg}/api.py",
        f"{pkg}/utils/__init__.py",
        f"{pkg}/utils/text.py",
        "tests/test_api.py",
    ]
    files = {p: f"# {p}\n" for p in src}
    caches = [f"{pkg}/__pycache__", f"{pkg}/utils/__pycache__", "tests/__pycache__"]
    if rng.random() < 0.5:
        caches.append("__pycache__")
        files["conftest.py"] = "# conftest\n"
    for c in caches:
        files[f"{c}/mod.cpython-311.pyc"] = "compiled\n"
    files["build/lib/stub.txt"] = "build output\n"
    files["dist/pkg-0.1.tar.gz.txt"] = "dist output\n"
    files["setup.py"] = "from setuptools import setup\nsetup()\n"
    with_logs = rng.random() < 0.5
    if with_logs:
        files["debug.log"] = "noise\n"
        files[f"{pkg}/trace.log"] = "noise\n"
    user = rng.choice(
        (
            "Clean this project: remove every __pycache__ folder, the build/ and dist/ directories"
            + (", and all *.log files." if with_logs else ". Keep the sources."),
            "Please get rid of the build artefacts here (build/, dist/, all __pycache__ dirs"
            + (", any .log files)." if with_logs else ")."),
            "Tidy the repo before I zip it: no __pycache__ anywhere, no build/ or dist/"
            + (", no log files." if with_logs else "."),
        )
    )
    steps = [
        Step("ls", say=say(rng, LOOK), alternatives=["ls -1", "ls ."]),
        Step(
            "find . -type d -name __pycache__ | sort",
            say="Where are the caches?",
            alternatives=["find . -name __pycache__ -type d | sort", "find . -type d -name '__pycache__' | sort"],
        ),
    ]
    if fail:
        steps.append(Step(f"rm -rf __pycache__ {pkg}/__pycache__ build dist", say=say(rng, ACT)))
    else:
        steps.append(
            Step(
                "find . -type d -name __pycache__ -prune -exec rm -rf {} +",
                say=say(rng, ACT),
                alternatives=[
                    "find . -name __pycache__ -type d -exec rm -rf {} +",
                    "find . -depth -type d -name __pycache__ -exec rm -rf {} +",
                ],
                near_misses=[
                    (
                        "find . -type d -name __pycache__ -exec rm -rf {} \\;",
                        "removes the same folders but find then complains that it cannot enter them",
                    )
                ],
            )
        )
        steps.append(Step("rm -rf build dist", alternatives=["rm -r build dist", "rm -rf build/ dist/"]))
    if with_logs:
        steps.append(Step("find . -name '*.log' -delete", alternatives=["find . -type f -name '*.log' -exec rm {} +"]))
    steps.append(
        Step(
            "find . | sort",
            label="tree",
            say=say(rng, CHECK),
            alternatives=["find . -print | sort"],
            near_misses=[("find . -type f | sort", "lists only the files")],
        )
    )

    def finish(o: Outcome) -> Finish:
        left = [p for p in o.final.modes if "__pycache__" in p or p.startswith(("build", "dist")) or p.endswith(".log")]
        text = rng.choice(
            (
                "Cleaned up: all __pycache__ folders, build/ and dist/"
                + (" and the .log files" if with_logs else "")
                + " are gone; sources and tests are untouched.",
                f"Removed {plural(len(caches), '__pycache__ folder')} plus build/ and dist/"
                + (" and the logs." if with_logs else ".")
                + " The remaining tree is above.",
            )
        )
        ok = not left and all(p in o.final.files for p in src)
        return Finish([text], ok)

    return TaskPlan(
        fixture(files, "/testbed"),
        [Segment(user, steps)],
        finish,
        "deleted only the top-level caches by name, leaving nested __pycache__ folders" if fail else None,
    )
