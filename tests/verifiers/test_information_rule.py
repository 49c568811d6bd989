"""The pieces of the local rewards that need no sandbox: what an output shows, a command's spelling, a call's target."""

from __future__ import annotations

from pivot_envs.verifiers.helpers.call_targets import call_targets, target_difference
from pivot_envs.verifiers.helpers.information import compare, dump_reason, status_difference
from pivot_envs.verifiers.helpers.shell_words import shell_words

LS = "app.log\nnotes.txt\n"
LS_L = ("total 8\n-rw-r--r-- 1 nobody nogroup 120 Nov 27 20:51 app.log\n"
        "-rw-r--r-- 1 nobody nogroup 42 Nov 27 20:51 notes.txt\n")


def carried(expert_out: str, cand_out: str, expert_cmd: str, cand_cmd: str, tree: tuple[str, ...] = ()) -> bool:
    return compare(expert_out, cand_out, expert_cmd, cand_cmd, "/work", list(tree))[0].carried


def test_another_layout_of_the_same_information_is_carried() -> None:
    assert carried(LS, LS_L, "ls", "ls -l")
    assert carried("a/x\na/y\nb/z\n", "b/z\na/y\na/x\n", "tar -tzf p.tgz | sort", "tar -tzf p.tgz")
    assert carried("3\n", "3 logs/app.log\n", "wc -l < logs/app.log", "wc -l logs/app.log")
    assert carried("./logs/a.log\n./logs/b.log\n", "logs/a.log\nlogs/b.log\n", "find . -name '*.log'", "find logs -name '*.log'")
    assert carried("/work/logs/a.log\n", "logs/a.log\n", "find /work -name a.log", "find . -name a.log")


def test_what_a_wrong_command_shows_is_not_carried() -> None:
    assert not carried(LS, "/work\n", "ls", "pwd")
    assert not carried(LS, "", "ls", "true")
    assert not carried(LS, "ok\n", "ls", "echo ok")
    assert not carried("3\n", "4\n", "grep -c ERROR app.log", "grep -c WARN app.log")
    assert not carried("3\n", "3\n", "grep -c ERROR app.log", "echo 3")  # what a command says of itself tells nothing
    assert not carried("last line\n", "first line\n", "tail -n 1 f", "head -n 1 f")


def test_dumps_are_not_answers() -> None:
    expert = "logs/a.log:3:ERROR disk full\n"
    page = "".join(f"logs/a.log:{i}:line {i} of the log\n" for i in range(1, 40))
    assert not carried(expert, page + expert, "grep -rn ERROR logs", "grep -rn . logs")
    assert dump_reason("21\n", "x\n" * 30)
    numbers = "".join(f"-rw-r--r-- 1 nobody nogroup {100 + i} Nov {i} 20:{i:02d} f{i}\n" for i in range(1, 9))
    assert not carried("21\n", numbers + "21 x\n", "wc -l < f", "ls -la")  # a count in a page of numbers
    tree = tuple(f"src/m{i}.py" for i in range(8)) + ("README.md", "setup.cfg")
    listing = "\n".join(f"./{p}" for p in tree)
    assert not carried("src/m1.py\n", listing, "grep -rl TODO src", "find .", tree)
    assert carried(listing, listing, "find . -type f", "find .", tree)  # the expert listed the tree itself


def test_exit_statuses() -> None:
    assert status_difference(0, "x", 1, candidate_output="", candidate_errors="no such file")
    assert status_difference(0, "x", 2, candidate_output="x")
    assert status_difference(0, "0\n", 1, candidate_output="0\n") is None  # grep -c found nothing: not a failure
    assert status_difference(1, "", 0) and status_difference(1, "", 1) is None  # a negative test
    assert status_difference(1, "0\n", 0) is None  # grep -c 0 where grep | wc -l says 0
    assert status_difference(1, "", 0, expert_wrote=True) is None  # diff a b > d: the files decide


def test_shell_words_respells_only_what_keeps_the_meaning() -> None:
    assert shell_words('grep  -rn "ERROR"   logs ') == shell_words("grep -rn 'ERROR' logs") == "grep -rn ERROR logs"
    assert shell_words('find . -name "*.log"') == shell_words("find . -name '*.log'") != shell_words("find . -name *.log")
    assert shell_words('echo "$HOME"') != shell_words("echo '$HOME'")
    assert shell_words("ls 2>/dev/null") != shell_words("ls 2 > /dev/null")
    assert shell_words("tar -czf a.tgz d") != shell_words("tar -cfz a.tgz d")
    assert shell_words("echo 'unbalanced") == "echo 'unbalanced"


def test_call_targets() -> None:
    edit = call_targets({"start_line": 43, "end_line": 43, "replacement": "x"})
    assert target_difference(edit, call_targets({"start_line": 42, "end_line": 44})) is None
    assert target_difference(edit, call_targets({"start_line": 14, "end_line": 43})) is not None
    opened = call_targets({"path": "./pkg/paging.py"})
    assert target_difference(opened, call_targets({"path": "pkg/paging.py"})) is None
    assert target_difference(opened, call_targets({"path": "pkg/other.py"})) is not None
    assert target_difference(call_targets({"search_term": "def parse_ini"}), call_targets({"search_term": "parse_ini def"})) is None
    assert target_difference(call_targets({"search_term": "def parse_ini"}), call_targets({"search_term": "class Config"}))
    assert target_difference({}, opened) is not None and target_difference({}, opened, same_tool=True) is None
