"""Issue 50's targets for the house, measured on the tree as it is (``ast`` over every project module).

    python benchmarks/house/house.py                  # the table
    python benchmarks/house/house.py --detail         # ... and what each figure counted, file by file
    python benchmarks/house/house.py --contracts      # ... and whether a contract fails a leaking generator
    python benchmarks/house/house.py --json OUT.json  # the figures and their files as JSON (``-`` for stdout)

Project modules: every ``.py`` file of the package's tree, ``pivot_envs/`` and the founding folders its links point
to (``pivot_envs/verifiers -> ../verifiers``: they install as ``pivot_envs.*``), each read once and named by its
folder in the repository; a tree with pyproject's ``package-dir`` (before 0.2.0) maps its folders instead. Tests,
benchmarks and examples are not project modules.
The signals are names and strings in the syntax tree, never today's file names, so the script measures the
layout after a move as well as before. Each figure, as counted:

* **places a built-in domain lives** (per domain of ``--domains``): a project module *holds* domain D when
  (a) a folder on its path is named D or its file is named D or ``D_*``; or (b) at module level (outside function
  bodies) the string D is a dict key, the value of a ``name=``/``domain=``/``world=`` keyword, or the first
  argument of a call whose callee's name holds ``register``; or (c) it defines a top-level function or class whose
  name starts with D (``terminal_verifier``, ``TerminalWorld``); or (d) it defines an UPPER_CASE constant that a
  module of (a)-(c) imports and uses inside such a D-named definition (the recipe's constants). A folder named D
  (with or without modules: ``envs_data/terminal/``) is also a place, unless it is a model folder (it holds a
  ``config.json``: the demo's prebuilt base for D is an experiment's artefact, not the domain). A *place* is the topmost folder named D
  on a file's path, else the file itself. Target: 1 (one folder).
* **files to open to add a verifier for a new action type**: the new module and its test (2), plus every
  *hand-kept list*: a project module with a module-level tuple, list, set or dict literal holding >= 3 registered verifier
  names or verifier module names, or importing >= 3 verifier-registering modules in one module-level statement;
  ``.importlinter`` when it names >= 3 ``pivot_envs.verifiers.<module>`` one by one; a ``docs/*.md`` table with
  >= 3 rows that start with a registered verifier name, unless the 5 lines above it say ``generated``. Registered
  names: the string first argument of a decorator or call whose callee's name holds ``register`` in a module under
  the verifiers' folder.
* **files to open to change the advantage**: project modules that hold a piece of the advantage's logic: they
  list the modes (a module-level tuple whose name holds ``MODE`` and which holds ``"grpo"``) or the zero-variance
  rules (a tuple named ``*ZERO_VARIANCE*``), define a function or class whose name holds ``advantage`` or
  ``baseline``, or branch on the mode or the rule (a comparison of ``advantage`` or ``zero_variance`` with a mode's or
  rule's name). A module that only passes the settings along (a config field, a keyword) is not a place
  of the advantage: changing the formula does not open it. Tests and docs are not counted.
* **fields declared in more than one config class**: classes named ``*Config`` or ``*Settings``; a field is an
  annotated name in the class body (inherited fields are not declarations). The figure: field names declared in
  >= 2 classes; also the declarations beyond the first, and the class pairs that share the most.
* **private names imported across modules**: distinct ``(module, _name)`` pairs of ``from M import _name`` with M
  a project module (``_x``, not ``__x__``), in project modules.
* **in-function project imports**: ``import``/``from`` statements of ``pivot_envs`` (or relative) inside a function
  body (:mod:`imports_in_functions`, whose count this is).
* **a generator importing a verifier helper fails a contract** (``--contracts``, about a minute): the sources are
  copied into a wheel's layout; beside the first domain's generator (the first data-package module that holds the
  domain and defines ``generate``: ``envs_data/terminal/generator.py``; before 0.2.0
  ``envs_data/generators/terminal.py``) go probe modules, one per verifier helper (a ``pivot_envs.verifiers.*``
  module that registers no verifier), each importing its helper; ``lint-imports`` with ``.importlinter`` runs on
  the copy. The figure: the helpers whose import a contract reports. Target: every one.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from imports_in_functions import count as in_function_imports

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
DOMAINS = ("terminal", "tool_use", "search", "swe")
DOMAIN_KEYWORDS = {"name", "domain", "world"}
ADVANTAGE_NAMES = {"advantage", "zero_variance", "turn_credit"}
MIN_LIST = 3


@dataclass
class Module:
    """One project module: its path (from the repository root), dotted name and syntax tree."""

    path: str
    name: str
    tree: ast.Module
    imports: dict[str, str] = field(default_factory=dict)  # local name -> "module:name" of module-level from-imports


def package_folders() -> dict[str, str]:
    """Folder (from the root) -> package name: pyproject's ``package-dir`` where it has one, else ``pivot_envs/``
    and every folder a link directly under it points to (``verifiers`` -> ``pivot_envs.verifiers``)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapping = pyproject.get("tool", {}).get("setuptools", {}).get("package-dir")
    if mapping:
        return {folder.strip("/"): package for package, folder in mapping.items() if package}
    links = {f"pivot_envs.{link.name}": link.resolve().relative_to(ROOT).as_posix()
             for link in sorted((ROOT / "pivot_envs").iterdir()) if link.is_symlink() and link.is_dir()}
    return {folder: package for package, folder in {"pivot_envs": "pivot_envs", **links}.items()}


def project_modules() -> list[Module]:
    """Every project module, parsed; a file under nested package folders is read once, as its deepest package."""
    folders = package_folders()
    seen: dict[Path, Module] = {}
    for folder, package in sorted(folders.items(), key=lambda kv: len(kv[0])):
        for path in sorted((ROOT / folder).rglob("*.py")):  # rglob does not follow a link: each file once
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            seen[path] = Module(str(path.relative_to(ROOT)), name, tree, module_imports(tree, name))
    return sorted(seen.values(), key=lambda m: m.path)


def resolve(module: str | None, level: int, here: str) -> str:
    """The absolute module name of a ``from`` import (relative ones resolved against ``here``)."""
    if not level:
        return module or ""
    base = here.split(".")[: -level] if level else []
    return ".".join([*base, module] if module else base)


def module_imports(tree: ast.Module, here: str) -> dict[str, str]:
    """Local name -> ``module:name`` for the module-level ``from X import name`` statements."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            source = resolve(node.module, node.level, here)
            for alias in node.names:
                out[alias.asname or alias.name] = f"{source}:{alias.name}"
    return out


def module_level(tree: ast.Module):
    """The module-level nodes: every node not inside a function body."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def callee_name(node: ast.AST) -> str:
    """``register_world`` for ``register_world(...)``, ``register`` for ``REG.register(...)``."""
    func = node.func if isinstance(node, ast.Call) else node
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def is_str(node: ast.AST | None, value: str | None = None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and (value is None or node.value == value)


# --- places a built-in domain lives ---------------------------------------------------------------------------

def named_for(name: str, domain: str) -> bool:
    """A function, class or file named for ``domain``: ``terminal``, ``terminal_tasks``, ``TerminalWorld``."""
    flat = domain.replace("_", "")
    return name == domain or name.startswith(domain + "_") or name.lower().startswith(flat) and name[:1].isupper()


def keys_domain(tree: ast.Module, domain: str) -> bool:
    """(b): at module level, ``domain`` is a dict key, a name=/domain=/world= value, or a register call's first arg."""
    for node in module_level(tree):
        if isinstance(node, ast.Dict) and any(is_str(k, domain) for k in node.keys):
            return True
        if isinstance(node, ast.Call):
            if any(k.arg in DOMAIN_KEYWORDS and is_str(k.value, domain) for k in node.keywords):
                return True
            if "register" in callee_name(node) and node.args and is_str(node.args[0], domain):
                return True
    return False


def domain_definitions(tree: ast.Module, domain: str) -> list[ast.AST]:
    """(c): the top-level functions and classes named for ``domain``."""
    return [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and named_for(n.name, domain)]


def holds_domain(module: Module, domain: str) -> bool:
    """(a), (b) or (c) of the docstring."""
    parts = Path(module.path).with_suffix("").parts
    on_path = any(p == domain for p in parts[:-1]) or named_for(parts[-1], domain)
    return on_path or keys_domain(module.tree, domain) or bool(domain_definitions(module.tree, domain))


def ingredients(module: Module, domain: str, by_name: dict[str, Module]) -> set[str]:
    """(d): modules whose UPPER_CASE constants ``module`` uses inside its definitions named for ``domain``."""
    out = set()
    for definition in domain_definitions(module.tree, domain):
        for node in ast.walk(definition):
            if isinstance(node, ast.Name) and node.id.isupper() and node.id in module.imports:
                source = module.imports[node.id].split(":")[0]
                if source in by_name and source != module.name:
                    out.add(by_name[source].path)
    return out


def place(path: str, domain: str) -> str:
    """The topmost folder named ``domain`` on ``path`` (``envs_data/terminal/``), else the path itself."""
    parts = Path(path).parts
    for i, part in enumerate(parts[:-1]):
        if part == domain:
            return "/".join(parts[: i + 1]) + "/"
    return path


def domain_places(modules: list[Module], domain: str) -> dict[str, list[str]]:
    """Place -> the files (or the folder itself) that put the domain there."""
    by_name = {m.name: m for m in modules}
    holding = {m.path for m in modules if holds_domain(m, domain)}
    holding |= {p for m in modules if m.path in holding for p in ingredients(m, domain, by_name)}
    folders = {f"{d.relative_to(ROOT)}/" for folder in package_folders() for d in (ROOT / folder).rglob(domain)
               if d.is_dir() and not (d / "config.json").exists()}  # a model folder is an experiment's artefact
    places: dict[str, list[str]] = {}
    for path in sorted(holding | folders):
        where = place(path, domain) if path not in folders else place(path + "x", domain)
        places.setdefault(where, []).append(path)
    return places


# --- files to open to add a verifier --------------------------------------------------------------------------

def verifier_folder(modules: list[Module]) -> str:
    """The folder of the ``pivot_envs.verifiers`` package."""
    return next(str(Path(m.path).parent) for m in modules if m.name == "pivot_envs.verifiers")


def registered_verifiers(modules: list[Module]) -> dict[str, str]:
    """Registered verifier name -> the module that registers it (decorators and calls holding ``register``)."""
    folder = verifier_folder(modules)
    out = {}
    for m in modules:
        if not m.path.startswith(folder + "/"):
            continue
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Call) and "register" in callee_name(node) and node.args and is_str(node.args[0]):
                out[node.args[0].value] = m.name
    return out


def collections_of(tree: ast.Module):
    """Module-level tuple, list and set literals' string items, and dict literals' string keys."""
    for node in module_level(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            yield [e.value for e in node.elts if is_str(e)]
        elif isinstance(node, ast.Dict):
            yield [k.value for k in node.keys if is_str(k)]


def hand_lists(modules: list[Module], names: dict[str, str]) -> dict[str, str]:
    """File -> why it is a hand-kept list of verifiers (see the docstring)."""
    registering = set(names.values())
    short = {m.rsplit(".", 1)[-1] for m in registering} | {m.rsplit(".", 1)[-1] for m in modules_named(modules)}
    out = {}
    for m in modules:
        for items in collections_of(m.tree):
            hits = [i for i in items if i in names or i in short]
            if len(hits) >= MIN_LIST:
                out[m.path] = f"a literal of {len(hits)} verifier names: {', '.join(hits[:4])}, ..."
                break
        for node in m.tree.body:
            if isinstance(node, ast.ImportFrom):
                source = resolve(node.module, node.level, m.name)
                targets = {f"{source}.{a.name}" for a in node.names} | ({source} if source in registering else set())
                if len(targets & registering) >= MIN_LIST:
                    out.setdefault(m.path, f"imports {len(targets & registering)} verifier modules to register them")
    linter = ROOT / ".importlinter"
    if linter.exists():
        named = set(re.findall(r"pivot_envs\.verifiers\.(\w+)\s*$", linter.read_text(encoding="utf-8"), re.M))
        if len(named) >= MIN_LIST:
            out[".importlinter"] = f"names {len(named)} verifier modules one by one"
    for doc in sorted((ROOT / "docs").glob("*.md")):
        why = doc_table(doc.read_text(encoding="utf-8").splitlines(), names)
        if why:
            out[str(doc.relative_to(ROOT))] = why
    return out


def modules_named(modules: list[Module]) -> set[str]:
    """The verifier package's modules (dotted names)."""
    return {m.name for m in modules if m.name.startswith("pivot_envs.verifiers.")}


def doc_table(lines: list[str], names: dict[str, str]) -> str | None:
    """Why a page holds a hand-kept verifier table (>= 3 rows starting with a verifier's name), or None."""
    rows = [i for i, line in enumerate(lines)
            if (m := re.match(r"\|\s*`?([\w-]+)`?\s*\|", line)) and m.group(1) in names]
    if len(rows) < MIN_LIST:
        return None
    above = " ".join(lines[max(0, rows[0] - 6): rows[0]]).lower()
    return None if "generated" in above else f"a table of {len(rows)} verifiers kept by hand"


# --- files to open to change the advantage --------------------------------------------------------------------

def advantage_modes(modules: list[Module]) -> set[str]:
    """The items of every module-level tuple whose name holds MODE and that holds ``"grpo"``."""
    modes = set()
    for m in modules:
        for node in m.tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, (ast.Tuple, ast.List)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                items = {e.value for e in node.value.elts if is_str(e)}
                if any("MODE" in getattr(t, "id", "") for t in targets) and "grpo" in items:
                    modes |= items
    return modes or {"grpo", "dr_grpo", "pvpo"}


def advantage_name(name: str) -> bool:
    """A snake-case name with the word ``advantage(s)`` or ``baseline`` (``group_advantages``; not ``baselines``,
    the baseline agents)."""
    return bool(set(name.lower().split("_")) & {"advantage", "advantages", "baseline"})


SETTING_NAMES = {"advantage", "zero_variance"}
"""The settings of the advantage (a bare ``mode`` is not counted: the D_adv filter has a ``pvpo`` mode too)."""


def _name_of(node: ast.AST) -> str | None:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None


def branches_on_mode(node: ast.AST, values: set[str]) -> bool:
    """``cfg.advantage == "pvpo"``, ``zero_variance != "keep"``, ``advantage in ("grpo", ...)``."""
    if not isinstance(node, ast.Compare):
        return False
    sides = [node.left, *node.comparators]
    named = any(_name_of(x) in SETTING_NAMES for x in sides)
    literal = any(isinstance(x, ast.Constant) and x.value in values for x in sides) or any(
        isinstance(x, (ast.Tuple, ast.List, ast.Set)) and any(is_str(e) and e.value in values for e in x.elts)
        for x in sides)
    return named and literal


def touches_advantage(tree: ast.Module, modes: set[str]) -> str | None:
    """Why a module is a place of the advantage (see the docstring), or None."""
    values = modes | {"skip", "resample", "keep"}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [getattr(t, "id", "") for t in targets]
            if any("MODE" in n and n != "ZERO_VARIANCE_MODES" for n in names) and isinstance(node.value, (ast.Tuple, ast.List)) \
                    and any(is_str(e) and e.value == "grpo" for e in node.value.elts):
                return "lists the modes"
            if any("ZERO_VARIANCE" in n for n in names):
                return "lists the zero-variance rules"
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and advantage_name(node.name):
            return f"defines {node.name}"
        if branches_on_mode(node, values):
            return f"branches on the mode or rule (line {node.lineno})"
    return None


# --- config fields, private and in-function imports -----------------------------------------------------------

def config_fields(modules: list[Module]) -> dict[str, list[str]]:
    """``Class (path)`` -> its declared field names, for classes named *Config or *Settings."""
    out = {}
    for m in modules:
        for node in ast.walk(m.tree):
            if isinstance(node, ast.ClassDef) and node.name.endswith(("Config", "Settings")):
                names = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
                if names:
                    out[f"{node.name} ({m.path})"] = names
    return out


def shared_fields(classes: dict[str, list[str]]) -> dict:
    """The field names declared in >= 2 classes, the copies beyond the first, the pairs that share the most."""
    seen = Counter(name for names in classes.values() for name in set(names))
    shared = {name: n for name, n in seen.items() if n > 1}
    pairs = sorted(((len(set(a[1]) & set(b[1])), a[0].split(" ")[0], b[0].split(" ")[0])
                    for a, b in combinations(classes.items(), 2)), reverse=True)
    return {"fields": len(shared), "copies": sum(n - 1 for n in shared.values()),
            "pairs": [{"classes": [a, b], "shared": n} for n, a, b in pairs if n][:6],
            "names": dict(sorted(shared.items(), key=lambda kv: (-kv[1], kv[0])))}


def private_imports(modules: list[Module]) -> dict[str, list[str]]:
    """``module:_name`` -> the project modules that import it (single-underscore names of project modules)."""
    out: dict[str, list[str]] = {}
    for m in modules:
        for node in ast.walk(m.tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = resolve(node.module, node.level, m.name)
            if not source.startswith("pivot_envs"):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    out.setdefault(f"{source}:{alias.name}", []).append(m.path)
    return out


def function_imports(modules: list[Module]) -> dict[str, list[int]]:
    """File -> the lines of its in-function imports of the project."""
    return {m.path: sorted(lines) for m in modules if (lines := in_function_imports(ROOT / m.path))}


# --- does a contract catch a generator importing a verifier helper? ---------------------------------------------

def probe_site(modules: list[Module], domains: tuple[str, ...], dest: Path) -> tuple[str, list[str]]:
    """The sources in a wheel's layout under ``dest`` with one probe module per verifier helper added beside the
    first domain's generator; returns (the probes' package, the helpers)."""
    for folder, package in sorted(package_folders().items(), key=lambda kv: kv[1].count(".")):
        shutil.copytree(ROOT / folder, dest.joinpath(*package.split(".")), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.jsonl*", "*.safetensors"))
    registering = set(registered_verifiers(modules).values())
    helpers = sorted(m.name for m in modules if m.name.startswith("pivot_envs.verifiers.") and m.name not in registering
                     and not m.path.endswith("__init__.py"))
    generators = [m.name for m in modules if m.name.startswith("pivot_envs.envs_data.") and holds_domain(m, domains[0])
                  and not m.path.endswith("__init__.py") and defines(m.tree, "generate")]
    package = generators[0].rsplit(".", 1)[0] if generators else "pivot_envs.envs_data"
    for i, helper in enumerate(helpers):
        probe = dest.joinpath(*package.split("."), f"_house_probe_{i}.py")
        probe.write_text(f"import {helper}  # noqa: F401\n")
    return package, helpers


def defines(tree: ast.Module, name: str) -> bool:
    """Whether the module defines a top-level function ``name``."""
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in tree.body)


def contract_catches(modules: list[Module], domains: tuple[str, ...]) -> dict:
    """How many verifier helpers a generator may import without a contract failing (see the docstring)."""
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists() or not (ROOT / ".importlinter").exists():
        return {"caught": None, "why": "lint-imports or .importlinter missing"}
    with tempfile.TemporaryDirectory() as tmp:
        package, helpers = probe_site(modules, domains, Path(tmp))
        done = subprocess.run([str(lint), "--no-cache", str(ROOT / ".importlinter")], cwd=tmp,
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": tmp}, timeout=600)
    text = " ".join(done.stdout.split())  # lint-imports wraps long lines
    caught = [h for i, h in enumerate(helpers) if re.search(rf"_house_probe_{i} -> {re.escape(h)}\b", text)]
    missed = [h for h in helpers if h not in caught]
    return {"caught": not missed, "probes": f"{package}._house_probe_N", "helpers": len(helpers),
            "caught_helpers": len(caught), "missed": missed}


# --- the table ------------------------------------------------------------------------------------------------

def measure(domains: tuple[str, ...], contracts: bool = False) -> dict:
    """Every figure, with the files behind it."""
    modules = project_modules()
    names = registered_verifiers(modules)
    lists = hand_lists(modules, names)
    modes = advantage_modes(modules)
    advantage = {m.path: why for m in modules if (why := touches_advantage(m.tree, modes))}
    places = {d: domain_places(modules, d) for d in domains}
    privates = private_imports(modules)
    in_functions = function_imports(modules)
    return {
        "modules": len(modules),
        "domain_places": {d: {"places": len(p), "where": p} for d, p in places.items()},
        "add_verifier": {"files": 2 + len(lists), "hand_lists": len(lists), "where": lists,
                         "registered": len(names), "registering_modules": len(set(names.values()))},
        "change_advantage": {"files": len(advantage), "modes": sorted(modes), "where": advantage},
        "config_fields": shared_fields(config_fields(modules)),
        "private_imports": {"names": len(privates), "where": privates},
        "function_imports": {"imports": sum(map(len, in_functions.values())), "where": in_functions},
        **({"contracts": contract_catches(modules, domains)} if contracts else {}),
    }


def table(figures: dict) -> str:
    """The figures as a markdown table (issue 50's targets beside them)."""
    places = figures["domain_places"]
    add, adv, cfg = figures["add_verifier"], figures["change_advantage"], figures["config_fields"]
    rows = [
        ("places a built-in domain lives", ", ".join(f"{d} {v['places']}" for d, v in places.items()), "1 folder"),
        ("files to open to add a verifier for a new action type", f"{add['files']} ({add['hand_lists']} lists by hand)",
         "<= 5, no list by hand"),
        ("files to open to change the advantage", str(adv["files"]), "<= 3"),
        ("fields declared in more than one config class", f"{cfg['fields']} ({cfg['copies']} copies)", "0"),
        ("private names imported across modules", str(figures["private_imports"]["names"]), "0"),
        ("in-function project imports", str(figures["function_imports"]["imports"]), "<= 10"),
    ]
    if "contracts" in figures:
        caught = figures["contracts"]["caught"]
        c = figures["contracts"]
        now = "not measured" if caught is None else f"{c['caught_helpers']} of {c['helpers']} helpers caught"
        rows.append(("a generator importing a verifier helper fails a contract", now, "every helper"))
    lines = ["| figure | now | target |", "|---|---|---|", *(f"| {a} | {b} | {c} |" for a, b, c in rows)]
    return "\n".join(lines)


def detail(figures: dict) -> str:
    """What each figure counted, file by file."""
    out = []
    for domain, v in figures["domain_places"].items():
        out.append(f"\n{domain}: {v['places']} places")
        out += [f"  {p}" + (f" ({', '.join(files)})" if files != [p] else "") for p, files in v["where"].items()]
    add = figures["add_verifier"]
    out.append(f"\nadd a verifier: the new module, its test + {add['hand_lists']} lists by hand "
               f"({add['registered']} registered names in {add['registering_modules']} modules)")
    out += [f"  {p}: {why}" for p, why in add["where"].items()]
    out.append(f"\nchange the advantage: {figures['change_advantage']['files']} files")
    out += [f"  {p}: {why}" for p, why in figures["change_advantage"]["where"].items()]
    cfg = figures["config_fields"]
    out.append(f"\nconfig fields declared twice or more: {cfg['fields']}")
    out += [f"  {' & '.join(p['classes'])}: {p['shared']} shared" for p in cfg["pairs"]]
    out.append(f"\nprivate names imported across modules: {figures['private_imports']['names']}")
    out += [f"  {name} <- {', '.join(users)}" for name, users in figures["private_imports"]["where"].items()]
    out.append(f"\nin-function project imports: {figures['function_imports']['imports']}")
    out += [f"  {p}: lines {', '.join(map(str, lines))}" for p, lines in figures["function_imports"]["where"].items()]
    if "contracts" in figures:
        c = figures["contracts"]
        out.append(f"\ncontracts: probes {c.get('probes', '')}, each importing one verifier helper; "
                   f"imports no contract fails: {len(c.get('missed', []))}")
        out += [f"  {h}" for h in c.get("missed", [])]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--domains", default=",".join(DOMAINS), help="the built-in domains to place")
    parser.add_argument("--detail", action="store_true", help="also print what each figure counted")
    parser.add_argument("--contracts", action="store_true",
                        help="also check that .importlinter fails a generator importing a verifier helper (~1 min)")
    parser.add_argument("--json", help="write the figures as JSON to this file (- for stdout, without the table)")
    args = parser.parse_args(argv)
    figures = measure(tuple(d for d in args.domains.split(",") if d), args.contracts)
    if args.json == "-":
        json.dump(figures, sys.stdout, indent=1)
        return
    print(f"{figures['modules']} project modules\n")
    print(table(figures))
    if args.detail:
        print(detail(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
