"""Module templates and injectable bugs for the SWE generator (``swe.py``).

A small repository is built by combining a few :class:`ModuleTemplate` objects
(a text utilities module, an inventory class, a priority scheduler, matrix
helpers, a config parser, statistics helpers, list helpers). Every template is
plain Python with ``${name}`` placeholders (``string.Template`` syntax) for the
package, the module and the public identifiers, so each seed gets different
names. Each template carries a test file that passes on the correct code and a
set of :class:`BugSite` objects: one exact piece of correct code, the buggy
code that replaces it, a plausible edit that does *not* fix it (for failed
episodes), and what an issue reporter and an expert would say about it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FAMILIES = (
    "off_by_one",
    "wrong_comparison",
    "missing_none_check",
    "wrong_default",
    "wrong_dict_key",
    "swapped_arguments",
    "missing_return",
    "int_division",
    "wrong_string_method",
    "exception_not_raised",
    "wrong_method",
)
"""Bug families, in a fixed order (sampling iterates over this tuple)."""


@dataclass(frozen=True)
class BugSite:
    """One injectable bug of a module template (all strings are ``${}`` templates).

    Attributes:
        family: the bug family (one of :data:`FAMILIES`).
        func: placeholder of the function or method that holds the bug (what the expert searches for).
        correct: exact, unique text of the correct code in the module source.
        buggy: the text that replaces ``correct`` to inject the bug.
        wrong: ``(find, replace)`` applied to the *buggy* module: a plausible edit that leaves the bug in.
        snippet: reproduction code from the issue; it prints one line.
        titles: issue titles.
        symptoms: one-sentence descriptions of the symptom, as a user would write them.
        diagnosis: the expert's explanation of the bug and the fix.
        wrong_diagnosis: the expert's (mistaken) explanation in a failed episode.
    """

    family: str
    func: str
    correct: str
    buggy: str
    wrong: tuple[str, str]
    snippet: str
    titles: tuple[str, ...]
    symptoms: tuple[str, ...]
    diagnosis: str
    wrong_diagnosis: str


@dataclass(frozen=True)
class ModuleTemplate:
    """A module of a generated package, with its tests and its bug sites.

    Attributes:
        key: short unique name of the template.
        stems: file-name choices for the module (without ``.py``).
        names: placeholder -> identifier choices (pools are disjoint across templates).
        exports: placeholders re-exported by the package ``__init__``.
        blurbs: one-line descriptions used in docstrings and the README.
        source: the module source template.
        tests: the test-file template (plain ``assert`` functions named ``test_*``).
        sites: the bugs this module can carry.
    """

    key: str
    stems: tuple[str, ...]
    names: dict[str, tuple[str, ...]]
    exports: tuple[str, ...]
    blurbs: tuple[str, ...]
    source: str
    tests: str
    sites: tuple[BugSite, ...] = field(default_factory=tuple)


TEXT = ModuleTemplate(
    key="text",
    stems=("text", "strings", "textutils", "wording"),
    names={
        "slugify": ("slugify", "make_slug", "to_slug"),
        "truncate": ("truncate", "shorten", "clip_text", "ellipsize"),
        "word_count": ("word_count", "count_words", "n_words"),
        "chunks": ("chunks", "split_every", "chunk_text"),
        "initials": ("initials", "name_initials", "get_initials"),
        "center": ("center", "pad_center", "centered"),
    },
    exports=("slugify", "truncate", "word_count", "chunks", "initials", "center"),
    blurbs=("helpers for cleaning up short pieces of text", "string utilities for titles, names and labels"),
    source=r'''"""Helpers for cleaning up and reshaping short pieces of text."""

import re

_NON_WORD = re.compile(r"[^a-z0-9]+")


def ${slugify}(text, sep="-"):
    """Turn ``text`` into a lowercase, URL-friendly slug."""
    slug = _NON_WORD.sub(sep, text.lower())
    return slug.strip(sep)


def ${truncate}(text, width, suffix="..."):
    """Shorten ``text`` to at most ``width`` characters, ending with ``suffix``."""
    if len(text) <= width:
        return text
    return text[: width - len(suffix)] + suffix


def ${word_count}(text):
    """Number of whitespace-separated words in ``text``."""
    return len(text.split())


def ${chunks}(text, size):
    """Split ``text`` into pieces of ``size`` characters; the last one may be shorter."""
    if size < 1:
        raise ValueError("size must be at least 1")
    return [text[i : i + size] for i in range(0, len(text), size)]


def ${initials}(name):
    """Upper-case initials of a full name: 'ada lovelace' -> 'AL'; None -> ''."""
    if name is None:
        return ""
    return "".join(part[0].upper() for part in name.split())


def ${center}(text, width, fill=" "):
    """Center ``text`` in a field of ``width`` characters padded with ``fill``."""
    return text.center(width, fill)
''',
    tests=r'''from ${pkg}.${mod} import ${center}, ${chunks}, ${initials}, ${slugify}, ${truncate}, ${word_count}


def test_slugify_mixed_case():
    assert ${slugify}("Hello World") == "hello-world"
    assert ${slugify}("  Many   Spaces ", sep="_") == "many_spaces"


def test_truncate_keeps_short_text():
    assert ${truncate}("hello", 5) == "hello"
    assert ${truncate}("hi", 5) == "hi"


def test_truncate_long_text():
    assert ${truncate}("hello world", 8) == "hello..."


def test_word_count_ignores_extra_spaces():
    assert ${word_count}("  padded   text ") == 2
    assert ${word_count}("one") == 1


def test_chunks():
    assert ${chunks}("abcde", 2) == ["ab", "cd", "e"]
    assert ${chunks}("abcd", 2) == ["ab", "cd"]


def test_initials():
    assert ${initials}("ada lovelace") == "AL"
    assert ${initials}(None) == ""


def test_center():
    assert ${center}("ab", 6) == "  ab  "
    assert ${center}("ab", 6, "-") == "--ab--"
''',
    sites=(
        BugSite(
            family="wrong_string_method",
            func="slugify",
            correct="_NON_WORD.sub(sep, text.lower())",
            buggy="_NON_WORD.sub(sep, text.upper())",
            wrong=("    return slug.strip(sep)\n", "    return slug.strip(sep).lower()\n"),
            snippet='from ${pkg}.${mod} import ${slugify}\n\nprint(repr(${slugify}("Hello World")))\n',
            titles=("`${slugify}` returns an empty slug", "Slugs come out empty for capitalised titles"),
            symptoms=(
                "`${slugify}` gives back an empty string whenever the title contains capital letters.",
                "Calling `${slugify}` on a normal title such as \"Hello World\" produces an empty slug.",
                "Our article URLs are broken because `${slugify}` drops every upper-case letter.",
            ),
            diagnosis=(
                "`${slugify}` upper-cases the text before replacing everything outside `[a-z0-9]`, so every "
                "letter is stripped out. The text has to be lower-cased instead."
            ),
            wrong_diagnosis="The slug is probably just not lower-cased at the end; I'll lower-case the returned value.",
        ),
        BugSite(
            family="wrong_comparison",
            func="truncate",
            correct="    if len(text) <= width:\n",
            buggy="    if len(text) < width:\n",
            wrong=(
                "    return text[: width - len(suffix)] + suffix\n",
                "    return text[: width - len(suffix) + 1] + suffix\n",
            ),
            snippet='from ${pkg}.${mod} import ${truncate}\n\nprint(repr(${truncate}("hello", 5)))\n',
            titles=("`${truncate}` shortens text that already fits", "Text of exactly `width` characters gets truncated"),
            symptoms=(
                "`${truncate}` cuts a string even when its length is exactly `width`.",
                "A five-letter word passed to `${truncate}` with width 5 comes back with an ellipsis.",
            ),
            diagnosis=(
                "The early return uses `len(text) < width`, so a text whose length equals `width` is "
                "truncated although it fits. The comparison must be `<=`."
            ),
            wrong_diagnosis="The slice that builds the shortened text looks one character short; I'll widen it by one.",
        ),
        BugSite(
            family="off_by_one",
            func="truncate",
            correct="    return text[: width - len(suffix)] + suffix\n",
            buggy="    return text[: width - len(suffix) - 1] + suffix\n",
            wrong=("    if len(text) <= width:\n", "    if len(text) < width:\n"),
            snippet='from ${pkg}.${mod} import ${truncate}\n\nprint(repr(${truncate}("hello world", 8)))\n',
            titles=("`${truncate}` result is one character too short", "Off-by-one in `${truncate}`"),
            symptoms=(
                "The string returned by `${truncate}` is one character shorter than the requested width.",
                "`${truncate}(\"hello world\", 8)` drops one more letter than it should.",
            ),
            diagnosis=(
                "The slice keeps `width - len(suffix) - 1` characters, one fewer than there is room for. "
                "It should keep `width - len(suffix)` characters."
            ),
            wrong_diagnosis="The length check before the slice looks off by one; I'll make it strict.",
        ),
        BugSite(
            family="wrong_string_method",
            func="word_count",
            correct="    return len(text.split())\n",
            buggy='    return len(text.split(" "))\n',
            wrong=('    return len(text.split(" "))\n', '    return len(text.strip().split(" "))\n'),
            snippet='from ${pkg}.${mod} import ${word_count}\n\nprint(${word_count}("two  spaces here"))\n',
            titles=("`${word_count}` counts double spaces as words", "Wrong word count with repeated spaces"),
            symptoms=(
                "`${word_count}` over-counts when words are separated by more than one space.",
                "Text with two spaces in a row gives a word count that is too high.",
            ),
            diagnosis=(
                '`${word_count}` splits on a single space with `split(" ")`, which yields empty strings for '
                "repeated or leading spaces. Plain `split()` splits on runs of whitespace."
            ),
            wrong_diagnosis="The extra words probably come from leading and trailing spaces; I'll strip the text first.",
        ),
        BugSite(
            family="off_by_one",
            func="chunks",
            correct="for i in range(0, len(text), size)]",
            buggy="for i in range(0, len(text) - 1, size)]",
            wrong=("for i in range(0, len(text) - 1, size)]", "for i in range(0, len(text) - size, size)]"),
            snippet='from ${pkg}.${mod} import ${chunks}\n\nprint(${chunks}("abcde", 2))\n',
            titles=("`${chunks}` loses the last piece", "Last chunk missing from `${chunks}`"),
            symptoms=(
                "`${chunks}` silently drops the final, shorter piece of the text.",
                "When the text length is odd, the last character never shows up in the output of `${chunks}`.",
            ),
            diagnosis=(
                "The loop runs over `range(0, len(text) - 1, size)`, so a final chunk that starts at the last "
                "character is skipped. The range must go up to `len(text)`."
            ),
            wrong_diagnosis="The range end should leave room for a whole chunk; I'll stop it at `len(text) - size`.",
        ),
        BugSite(
            family="missing_none_check",
            func="initials",
            correct='    if name is None:\n        return ""\n',
            buggy="",
            wrong=(
                '    return "".join(part[0].upper() for part in name.split())\n',
                '    if not name.strip():\n        return ""\n'
                '    return "".join(part[0].upper() for part in name.split())\n',
            ),
            snippet="from ${pkg}.${mod} import ${initials}\n\nprint(repr(${initials}(None)))\n",
            titles=("`${initials}(None)` crashes", "AttributeError from `${initials}` for missing names"),
            symptoms=(
                "`${initials}` crashes when the name is `None`, although the docstring says it returns an empty string.",
                "Users without a name make `${initials}` raise an AttributeError.",
            ),
            diagnosis=(
                "`${initials}` calls `name.split()` without checking for `None` first, although the docstring "
                "promises `''` for `None`. We need to return early when `name is None`."
            ),
            wrong_diagnosis="The problem must be blank names; I'll return early when the stripped name is empty.",
        ),
        BugSite(
            family="wrong_default",
            func="center",
            correct='def ${center}(text, width, fill=" "):',
            buggy='def ${center}(text, width, fill="*"):',
            wrong=("    return text.center(width, fill)\n", '    return text.center(width, fill or " ")\n'),
            snippet='from ${pkg}.${mod} import ${center}\n\nprint(repr(${center}("ab", 6)))\n',
            titles=("`${center}` pads with asterisks by default", "Unexpected default fill character in `${center}`"),
            symptoms=(
                "Without an explicit `fill`, `${center}` pads with `*` instead of spaces.",
                "The default padding of `${center}` is not whitespace as documented.",
            ),
            diagnosis="The default value of `fill` is `\"*\"`, but text should be padded with spaces by default.",
            wrong_diagnosis="An empty fill should fall back to a space; I'll add that fallback in the call.",
        ),
    ),
)


INVENTORY = ModuleTemplate(
    key="inventory",
    stems=("inventory", "stock", "warehouse", "storage"),
    names={
        "shop": ("shop", "bakery", "bookstore", "hardware store", "pharmacy"),
        "Inventory": ("Inventory", "Stock", "StockBook", "Storeroom"),
        "add": ("add", "put", "receive", "stock_up"),
        "remove": ("remove", "take", "withdraw", "dispatch"),
        "count": ("count", "quantity", "on_hand", "level"),
        "low_stock": ("low_stock", "needs_reorder", "running_low"),
        "total_value": ("total_value", "valuation", "stock_value"),
        "transfer": ("transfer", "move_to", "transfer_to"),
    },
    exports=("Inventory",),
    blurbs=("stock keeping for a small shop", "a tiny inventory tracker"),
    source=r'''"""Stock keeping for a small ${shop}."""


class ${Inventory}:
    """Quantities of items keyed by SKU."""

    def __init__(self, items=None):
        self._items = dict(items or {})

    def ${add}(self, sku, qty=1):
        """Add ``qty`` units of ``sku`` and return the new quantity."""
        if qty <= 0:
            raise ValueError("quantity must be positive")
        self._items[sku] = self._items.get(sku, 0) + qty
        return self._items[sku]

    def ${remove}(self, sku, qty=1):
        """Take ``qty`` units of ``sku`` out; ValueError if there are not enough."""
        have = self._items.get(sku, 0)
        if qty > have:
            raise ValueError(f"only {have} of {sku!r} in stock")
        self._items[sku] = have - qty
        return self._items[sku]

    def ${count}(self, sku):
        """Units of ``sku`` in stock (0 for unknown SKUs)."""
        return self._items.get(sku, 0)

    def ${low_stock}(self, threshold=5):
        """Sorted SKUs whose quantity is at or below ``threshold``."""
        return sorted(sku for sku, qty in self._items.items() if qty <= threshold)

    def ${total_value}(self, prices):
        """Value of the stock for a ``prices`` mapping; unknown SKUs count as 0."""
        total = 0.0
        for sku, qty in self._items.items():
            total += qty * prices.get(sku, 0.0)
        return round(total, 2)

    def ${transfer}(self, other, sku, qty):
        """Move ``qty`` units of ``sku`` from this inventory into ``other``."""
        self.${remove}(sku, qty)
        other.${add}(sku, qty)
''',
    tests=r'''from ${pkg}.${mod} import ${Inventory}


def test_add_returns_new_quantity():
    inv = ${Inventory}()
    inv.${add}("apple", 2)
    assert inv.${add}("apple", 3) == 5


def test_remove_decrements():
    inv = ${Inventory}({"apple": 4})
    assert inv.${remove}("apple", 3) == 1
    assert inv.${count}("apple") == 1


def test_remove_too_many_raises():
    inv = ${Inventory}({"apple": 2})
    try:
        inv.${remove}("apple", 5)
    except ValueError:
        return
    raise AssertionError("expected ValueError")


def test_low_stock_default_threshold():
    inv = ${Inventory}({"flour": 5, "sugar": 12, "salt": 2})
    assert inv.${low_stock}() == ["flour", "salt"]


def test_low_stock_threshold_is_inclusive():
    inv = ${Inventory}({"a": 3, "b": 4})
    assert inv.${low_stock}(threshold=3) == ["a"]


def test_total_value_ignores_unknown_prices():
    inv = ${Inventory}({"pen": 4, "ink": 1, "pad": 2})
    assert inv.${total_value}({"pen": 1.5, "ink": 7.25}) == 13.25


def test_transfer_moves_stock():
    a = ${Inventory}({"bolt": 10})
    b = ${Inventory}()
    a.${transfer}(b, "bolt", 4)
    assert (a.${count}("bolt"), b.${count}("bolt")) == (6, 4)
''',
    sites=(
        BugSite(
            family="missing_return",
            func="add",
            correct="        self._items[sku] = self._items.get(sku, 0) + qty\n        return self._items[sku]\n",
            buggy="        self._items[sku] = self._items.get(sku, 0) + qty\n",
            wrong=(
                "        self._items[sku] = self._items.get(sku, 0) + qty\n",
                "        self._items[sku] = self._items.get(sku, 0) + qty\n        return qty\n",
            ),
            snippet=(
                "from ${pkg}.${mod} import ${Inventory}\n\ninv = ${Inventory}()\n"
                'inv.${add}("apple", 2)\nprint(inv.${add}("apple", 3))\n'
            ),
            titles=("`${Inventory}.${add}` returns None", "`${add}` does not return the new quantity"),
            symptoms=(
                "`${Inventory}.${add}` is documented to return the new quantity but returns `None`.",
                "I rely on the return value of `${add}` to show the stock level, and it is always `None`.",
            ),
            diagnosis=(
                "`${add}` updates `self._items[sku]` but never returns it, so callers get `None` "
                "instead of the new quantity. It needs a `return self._items[sku]`."
            ),
            wrong_diagnosis="`${add}` should return something; returning the added quantity looks right.",
        ),
        BugSite(
            family="exception_not_raised",
            func="remove",
            correct='            raise ValueError(f"only {have} of {sku!r} in stock")\n',
            buggy="            qty = have\n",
            wrong=("            qty = have\n", "            raise KeyError(sku)\n"),
            snippet=(
                "from ${pkg}.${mod} import ${Inventory}\n\n"
                'inv = ${Inventory}({"apple": 2})\n'
                "try:\n"
                '    inv.${remove}("apple", 5)\n'
                "except ValueError as exc:\n"
                '    print("ValueError:", exc)\n'
                "else:\n"
                '    print("no error, stock is now", inv.${count}("apple"))\n'
            ),
            titles=(
                "Removing more than is in stock does not raise",
                "`${remove}` silently empties the stock instead of failing",
            ),
            symptoms=(
                "Asking `${remove}` for more units than are in stock silently sets the stock to zero "
                "instead of raising `ValueError`.",
                "Overdrawing an item with `${Inventory}.${remove}` should fail, but it succeeds quietly.",
            ),
            diagnosis=(
                "When `qty > have`, `${remove}` clamps `qty` to `have` instead of raising the `ValueError` "
                "that its docstring promises. That branch must raise."
            ),
            wrong_diagnosis="The branch should raise for an unknown amount of the SKU; a `KeyError` with the SKU fits.",
        ),
        BugSite(
            family="wrong_comparison",
            func="low_stock",
            correct="if qty <= threshold)",
            buggy="if qty < threshold)",
            wrong=("def ${low_stock}(self, threshold=5):", "def ${low_stock}(self, threshold=6):"),
            snippet=(
                "from ${pkg}.${mod} import ${Inventory}\n\n"
                'inv = ${Inventory}({"flour": 5, "sugar": 12, "salt": 2})\nprint(inv.${low_stock}())\n'
            ),
            titles=("`${low_stock}` misses items exactly at the threshold", "Threshold of `${low_stock}` is not inclusive"),
            symptoms=(
                "Items whose quantity equals the threshold are not reported by `${low_stock}`.",
                "`${low_stock}` is documented as \"at or below\" the threshold but skips items at the threshold.",
            ),
            diagnosis=(
                "`${low_stock}` filters with `qty < threshold`, which excludes items exactly at the threshold; "
                "the docstring says \"at or below\", so it must be `<=`."
            ),
            wrong_diagnosis="The default threshold is probably one too low; I'll raise it to 6.",
        ),
        BugSite(
            family="wrong_default",
            func="low_stock",
            correct="def ${low_stock}(self, threshold=5):",
            buggy="def ${low_stock}(self, threshold=1):",
            wrong=("if qty <= threshold)", "if qty <= threshold + 1)"),
            snippet=(
                "from ${pkg}.${mod} import ${Inventory}\n\n"
                'inv = ${Inventory}({"flour": 5, "sugar": 12, "salt": 2})\nprint(inv.${low_stock}())\n'
            ),
            titles=("`${low_stock}()` reports almost nothing", "Wrong default threshold in `${low_stock}`"),
            symptoms=(
                "Called without arguments, `${low_stock}` ignores items with 2 or 5 units left.",
                "The default threshold of `${low_stock}` is much lower than the documented 5.",
            ),
            diagnosis="The default `threshold` of `${low_stock}` is 1; it should be 5.",
            wrong_diagnosis="The comparison seems too strict for small stocks; I'll allow one unit of slack.",
        ),
        BugSite(
            family="wrong_dict_key",
            func="total_value",
            correct="prices.get(sku, 0.0)",
            buggy="prices.get(qty, 0.0)",
            wrong=("prices.get(qty, 0.0)", "(prices.get(qty) or 0.0)"),
            snippet=(
                "from ${pkg}.${mod} import ${Inventory}\n\n"
                'inv = ${Inventory}({"pen": 4, "ink": 1})\nprint(inv.${total_value}({"pen": 1.5, "ink": 7.25}))\n'
            ),
            titles=("`${total_value}` is always 0.0", "Stock valuation ignores prices"),
            symptoms=(
                "`${total_value}` returns `0.0` even when every SKU has a price.",
                "The stock value computed by `${Inventory}.${total_value}` does not use the prices at all.",
            ),
            diagnosis=(
                "The loop looks prices up by `qty` instead of by `sku`, so it never finds a price. "
                "The lookup key must be the SKU."
            ),
            wrong_diagnosis="The lookup may be hitting stored `None` prices; I'll coerce missing prices to 0.0.",
        ),
        BugSite(
            family="swapped_arguments",
            func="transfer",
            correct="        other.${add}(sku, qty)\n",
            buggy="        other.${add}(qty, sku)\n",
            wrong=("        self.${remove}(sku, qty)\n", "        self.${remove}(sku, qty=qty)\n"),
            snippet=(
                "from ${pkg}.${mod} import ${Inventory}\n\n"
                'a = ${Inventory}({"bolt": 10})\nb = ${Inventory}()\n'
                'a.${transfer}(b, "bolt", 4)\nprint(a.${count}("bolt"), b.${count}("bolt"))\n'
            ),
            titles=("`${transfer}` crashes with a TypeError", "Cannot transfer stock between inventories"),
            symptoms=(
                "Moving stock from one inventory to another with `${transfer}` raises a `TypeError`.",
                "`${Inventory}.${transfer}` fails, and the units it already removed are lost.",
            ),
            diagnosis=(
                "`${transfer}` calls `other.${add}(qty, sku)` with the arguments swapped, so `${add}` compares "
                "the SKU string with 0. The call must be `other.${add}(sku, qty)`."
            ),
            wrong_diagnosis="The `${remove}` call may bind `qty` to the wrong parameter; I'll pass it by keyword.",
        ),
    ),
)


SCHEDULER = ModuleTemplate(
    key="scheduler",
    stems=("scheduler", "planner", "jobs", "taskqueue"),
    names={
        "Task": ("Task", "Job", "WorkItem"),
        "Scheduler": ("Scheduler", "Planner", "JobQueue", "TaskQueue"),
        "add": ("schedule", "enqueue", "push_task", "add_task"),
        "next_task": ("next_task", "pop_next", "take_next"),
        "total": ("total_duration", "workload", "total_time"),
        "average": ("average_duration", "mean_duration", "avg_duration"),
        "batches": ("batches", "in_batches", "grouped"),
    },
    exports=("Task", "Scheduler"),
    blurbs=("a tiny priority scheduler for background jobs", "priority queues for small job runners"),
    source=r'''"""A tiny priority scheduler: lower numbers run first."""

from dataclasses import dataclass, field


@dataclass(order=True)
class ${Task}:
    priority: int
    name: str = field(compare=False)
    duration: int = field(default=1, compare=False)


class ${Scheduler}:
    """Pending tasks, handed out most urgent first."""

    def __init__(self, workers=1):
        self.workers = workers
        self._pending = []

    def ${add}(self, name, priority=10, duration=1):
        """Queue a task; priority 0 is the most urgent."""
        task = ${Task}(priority, name, duration)
        self._pending.append(task)
        return task

    def ${next_task}(self):
        """Remove and return the most urgent task, or None when nothing is pending."""
        if not self._pending:
            return None
        best = self._pending[0]
        for task in self._pending[1:]:
            if task.priority < best.priority:
                best = task
        self._pending.remove(best)
        return best

    def ${total}(self):
        """Sum of the durations of all pending tasks."""
        return sum(task.duration for task in self._pending)

    def ${average}(self):
        """Mean duration of the pending tasks (0.0 when there are none)."""
        if not self._pending:
            return 0.0
        return self.${total}() / len(self._pending)

    def ${batches}(self, size):
        """Names of pending tasks in priority order, grouped ``size`` at a time."""
        names = [task.name for task in sorted(self._pending)]
        return [names[i : i + size] for i in range(0, len(names), size)]
''',
    tests=r'''from ${pkg}.${mod} import ${Scheduler}


def test_most_urgent_first():
    s = ${Scheduler}()
    s.${add}("backup", priority=5)
    s.${add}("deploy", priority=1)
    s.${add}("report", priority=3)
    assert s.${next_task}().name == "deploy"
    assert s.${next_task}().name == "report"


def test_idle_scheduler_returns_none():
    assert ${Scheduler}().${next_task}() is None


def test_default_priority_is_low():
    s = ${Scheduler}()
    s.${add}("cleanup")
    s.${add}("hotfix", priority=1)
    assert s.${next_task}().name == "hotfix"


def test_total_and_average():
    s = ${Scheduler}()
    s.${add}("a", duration=1)
    s.${add}("b", duration=2)
    assert s.${total}() == 3
    assert s.${average}() == 1.5


def test_batches():
    s = ${Scheduler}()
    for i, name in enumerate("abcde"):
        s.${add}(name, priority=i)
    assert s.${batches}(2) == [["a", "b"], ["c", "d"], ["e"]]
''',
    sites=(
        BugSite(
            family="wrong_comparison",
            func="next_task",
            correct="            if task.priority < best.priority:\n",
            buggy="            if task.priority > best.priority:\n",
            wrong=("            if task.priority > best.priority:\n", "            if task.priority >= best.priority:\n"),
            snippet=(
                "from ${pkg}.${mod} import ${Scheduler}\n\ns = ${Scheduler}()\n"
                's.${add}("backup", priority=5)\ns.${add}("deploy", priority=1)\nprint(s.${next_task}().name)\n'
            ),
            titles=("`${next_task}` returns the least urgent task", "Scheduler runs low-priority jobs first"),
            symptoms=(
                "`${Scheduler}.${next_task}` hands out the task with the *highest* priority number first.",
                "Urgent jobs (priority 1) wait behind background jobs (priority 5).",
            ),
            diagnosis=(
                "The loop in `${next_task}` keeps a task when `task.priority > best.priority`, which selects "
                "the least urgent task. Lower numbers are more urgent, so the comparison must be `<`."
            ),
            wrong_diagnosis="Ties between priorities may be the problem; I'll make the comparison inclusive.",
        ),
        BugSite(
            family="missing_none_check",
            func="next_task",
            correct="        if not self._pending:\n            return None\n        best",
            buggy="        best",
            wrong=("        self._pending.remove(best)\n", "        if best is None:\n            return None\n        self._pending.remove(best)\n"),
            snippet="from ${pkg}.${mod} import ${Scheduler}\n\nprint(${Scheduler}().${next_task}())\n",
            titles=("`${next_task}` crashes on an empty queue", "IndexError from an idle scheduler"),
            symptoms=(
                "Calling `${next_task}` when nothing is queued raises `IndexError` instead of returning `None`.",
                "Our worker loop polls `${next_task}` and crashes as soon as the queue is empty.",
            ),
            diagnosis=(
                "`${next_task}` reads `self._pending[0]` without checking that anything is pending; the "
                "docstring promises `None` for an empty queue, so it must return early."
            ),
            wrong_diagnosis="I'll guard against a missing best task before removing it.",
        ),
        BugSite(
            family="wrong_default",
            func="add",
            correct="def ${add}(self, name, priority=10, duration=1):",
            buggy="def ${add}(self, name, priority=0, duration=1):",
            wrong=("            if task.priority < best.priority:\n", "            if task.priority <= best.priority:\n"),
            snippet=(
                "from ${pkg}.${mod} import ${Scheduler}\n\ns = ${Scheduler}()\n"
                's.${add}("cleanup")\ns.${add}("hotfix", priority=1)\nprint(s.${next_task}().name)\n'
            ),
            titles=("Tasks without a priority jump the queue", "Default priority of `${add}` is too urgent"),
            symptoms=(
                "A task queued with `${add}` and no explicit priority runs before an urgent priority-1 task.",
                "Unprioritised tasks are treated as the most urgent ones.",
            ),
            diagnosis=(
                "`${add}` defaults `priority` to 0, the most urgent value, so unprioritised tasks run first. "
                "The default should be the low priority 10."
            ),
            wrong_diagnosis="The selection loop may pick the first of equal tasks; I'll make it prefer later ones.",
        ),
        BugSite(
            family="int_division",
            func="average",
            correct="        return self.${total}() / len(self._pending)\n",
            buggy="        return self.${total}() // len(self._pending)\n",
            wrong=(
                "        return self.${total}() // len(self._pending)\n",
                "        return float(self.${total}() // len(self._pending))\n",
            ),
            snippet=(
                "from ${pkg}.${mod} import ${Scheduler}\n\ns = ${Scheduler}()\n"
                's.${add}("a", duration=1)\ns.${add}("b", duration=2)\nprint(s.${average}())\n'
            ),
            titles=("`${average}` is rounded down", "Average duration loses the fraction"),
            symptoms=(
                "`${average}` returns a whole number even when the mean is fractional.",
                "The mean of durations 1 and 2 comes out as 1 instead of 1.5.",
            ),
            diagnosis=(
                "`${average}` uses floor division `//`, which drops the fractional part of the mean. "
                "It needs true division `/`."
            ),
            wrong_diagnosis="The result should be a float; I'll convert it with `float()`.",
        ),
        BugSite(
            family="off_by_one",
            func="batches",
            correct="[names[i : i + size] for i",
            buggy="[names[i : i + size - 1] for i",
            wrong=("for i in range(0, len(names), size)]", "for i in range(0, len(names) + 1, size)]"),
            snippet=(
                "from ${pkg}.${mod} import ${Scheduler}\n\ns = ${Scheduler}()\n"
                'for i, name in enumerate("abcde"):\n    s.${add}(name, priority=i)\nprint(s.${batches}(2))\n'
            ),
            titles=("`${batches}` returns batches that are too small", "Tasks go missing in `${batches}`"),
            symptoms=(
                "`${batches}(2)` returns single-task batches and some task names disappear.",
                "Every batch produced by `${batches}` is one task short.",
            ),
            diagnosis=(
                "The slice `names[i : i + size - 1]` takes one name fewer than `size`, so every batch is too "
                "small and names are lost. It must be `names[i : i + size]`."
            ),
            wrong_diagnosis="The range seems to stop too early; I'll extend it by one.",
        ),
        BugSite(
            family="missing_return",
            func="total",
            correct="        return sum(task.duration for task in self._pending)\n",
            buggy="        sum(task.duration for task in self._pending)\n",
            wrong=(
                "        return self.${total}() / len(self._pending)\n",
                "        return (self.${total}() or 0) / len(self._pending)\n",
            ),
            snippet=(
                "from ${pkg}.${mod} import ${Scheduler}\n\ns = ${Scheduler}()\n"
                's.${add}("a", duration=1)\ns.${add}("b", duration=2)\nprint(s.${total}())\n'
            ),
            titles=("`${total}` returns None", "Total duration is missing"),
            symptoms=(
                "`${Scheduler}.${total}` returns `None` instead of the sum of the durations.",
                "The workload report shows `None` for the total duration of the queue.",
            ),
            diagnosis="`${total}` computes the sum but never returns it. It needs a `return`.",
            wrong_diagnosis="The average should cope with a missing total; I'll default it to 0.",
        ),
    ),
)


MATRIX = ModuleTemplate(
    key="matrix",
    stems=("matrix", "linalg", "grid", "matops"),
    names={
        "shape": ("shape", "dims", "size_of"),
        "identity": ("identity", "eye", "unit_matrix"),
        "transpose": ("transpose", "transposed", "flip_axes"),
        "matmul": ("matmul", "multiply", "dot"),
        "trace": ("trace", "diagonal_sum", "diag_total"),
        "scale": ("scale", "scaled", "times"),
        "column_means": ("column_means", "col_means", "mean_columns"),
    },
    exports=("shape", "identity", "transpose", "matmul", "trace", "scale", "column_means"),
    blurbs=("matrix helpers for plain lists of rows", "small linear-algebra helpers without numpy"),
    source=r'''"""Matrix helpers for plain lists of rows."""


def ${shape}(m):
    """(rows, columns) of ``m``; an empty matrix is (0, 0)."""
    if not m:
        return (0, 0)
    return (len(m), len(m[0]))


def ${identity}(n):
    """The ``n`` x ``n`` identity matrix."""
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


def ${transpose}(m):
    """Rows become columns."""
    rows, cols = ${shape}(m)
    return [[m[i][j] for i in range(rows)] for j in range(cols)]


def ${matmul}(a, b):
    """Product of ``a`` (n x k) and ``b`` (k x p); ValueError if the shapes do not fit."""
    n, k = ${shape}(a)
    k2, p = ${shape}(b)
    if k != k2:
        raise ValueError(f"cannot multiply {n}x{k} by {k2}x{p}")
    return [[sum(a[i][t] * b[t][j] for t in range(k)) for j in range(p)] for i in range(n)]


def ${trace}(m):
    """Sum of the main diagonal."""
    return sum(m[i][i] for i in range(len(m)))


def ${scale}(m, factor):
    """Multiply every entry by ``factor``."""
    result = []
    for row in m:
        result.append([value * factor for value in row])
    return result


def ${column_means}(m):
    """Mean of each column, as floats."""
    rows, cols = ${shape}(m)
    return [sum(m[i][j] for i in range(rows)) / rows for j in range(cols)]
''',
    tests=r'''from ${pkg}.${mod} import ${column_means}, ${identity}, ${matmul}, ${scale}, ${shape}, ${trace}, ${transpose}


def test_shape():
    assert ${shape}([[1, 2, 3], [4, 5, 6]]) == (2, 3)
    assert ${shape}([]) == (0, 0)


def test_identity():
    assert ${identity}(3) == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]


def test_transpose_rectangular():
    assert ${transpose}([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]


def test_matmul():
    assert ${matmul}([[1, 2]], [[1, 0, 2], [0, 1, 3]]) == [[1, 2, 8]]
    assert ${matmul}(${identity}(2), [[5, 6], [7, 8]]) == [[5, 6], [7, 8]]


def test_matmul_shape_mismatch():
    try:
        ${matmul}([[1, 2, 3]], [[1, 2], [3, 4]])
    except ValueError:
        return
    raise AssertionError("expected ValueError")


def test_trace():
    assert ${trace}([[1, 2], [3, 4]]) == 5


def test_scale():
    assert ${scale}([[1, 2], [3, 4]], 10) == [[10, 20], [30, 40]]


def test_column_means():
    assert ${column_means}([[1, 2], [2, 4]]) == [1.5, 3.0]
''',
    sites=(
        BugSite(
            family="missing_none_check",
            func="shape",
            correct="    if not m:\n        return (0, 0)\n",
            buggy="",
            wrong=("    return (len(m), len(m[0]))\n", "    if m is None:\n        return (0, 0)\n    return (len(m), len(m[0]))\n"),
            snippet="from ${pkg}.${mod} import ${shape}\n\nprint(${shape}([]))\n",
            titles=("`${shape}([])` raises IndexError", "Empty matrices crash `${shape}`"),
            symptoms=(
                "`${shape}` fails with `IndexError` for an empty matrix instead of returning `(0, 0)`.",
                "Passing an empty list of rows to `${shape}` crashes.",
            ),
            diagnosis=(
                "`${shape}` reads `m[0]` unconditionally, which fails for an empty matrix; the docstring says "
                "an empty matrix is `(0, 0)`, so we must return early when `m` is empty."
            ),
            wrong_diagnosis="`${shape}` should handle a missing matrix; I'll return `(0, 0)` for `None`.",
        ),
        BugSite(
            family="wrong_comparison",
            func="identity",
            correct="[[1 if i == j else 0",
            buggy="[[1 if i >= j else 0",
            wrong=("[[1 if i >= j else 0", "[[1 if i <= j else 0"),
            snippet="from ${pkg}.${mod} import ${identity}\n\nprint(${identity}(3))\n",
            titles=("`${identity}` returns a triangular matrix", "Wrong entries in `${identity}(n)`"),
            symptoms=(
                "`${identity}(3)` has ones below the diagonal as well.",
                "The identity matrix from `${identity}` is lower-triangular instead of diagonal.",
            ),
            diagnosis="`${identity}` puts a 1 wherever `i >= j`; only the diagonal `i == j` should be 1.",
            wrong_diagnosis="The triangle is on the wrong side; I'll flip the comparison.",
        ),
        BugSite(
            family="swapped_arguments",
            func="transpose",
            correct="[[m[i][j] for i in range(rows)]",
            buggy="[[m[j][i] for i in range(rows)]",
            wrong=("    rows, cols = ${shape}(m)\n    return [[m[j][i]", "    cols, rows = ${shape}(m)\n    return [[m[j][i]"),
            snippet="from ${pkg}.${mod} import ${transpose}\n\nprint(${transpose}([[1, 2, 3], [4, 5, 6]]))\n",
            titles=("`${transpose}` fails for non-square matrices", "IndexError in `${transpose}`"),
            symptoms=(
                "Transposing a 2x3 matrix with `${transpose}` raises `IndexError`.",
                "`${transpose}` only seems to work for square matrices.",
            ),
            diagnosis=(
                "The comprehension reads `m[j][i]` with the indices swapped: `i` runs over rows and `j` over "
                "columns, so the entry must be `m[i][j]`."
            ),
            wrong_diagnosis="The row and column counts look swapped; I'll swap them in the unpacking.",
        ),
        BugSite(
            family="exception_not_raised",
            func="matmul",
            correct='    if k != k2:\n        raise ValueError(f"cannot multiply {n}x{k} by {k2}x{p}")\n',
            buggy="",
            wrong=(
                "    return [[sum(a[i][t]",
                '    if n != p:\n        raise ValueError(f"cannot multiply {n}x{k} by {k2}x{p}")\n    return [[sum(a[i][t]',
            ),
            snippet=(
                "from ${pkg}.${mod} import ${matmul}\n\n"
                "try:\n    print(${matmul}([[1, 2, 3]], [[1, 2], [3, 4]]))\n"
                'except ValueError as exc:\n    print("ValueError:", exc)\n'
            ),
            titles=("`${matmul}` does not validate shapes", "Confusing IndexError from `${matmul}`"),
            symptoms=(
                "Multiplying matrices of incompatible shapes gives an `IndexError` instead of the documented `ValueError`.",
                "`${matmul}` does not check that the inner dimensions agree.",
            ),
            diagnosis=(
                "`${matmul}` never checks that the column count of `a` equals the row count of `b`, so a "
                "mismatch surfaces as an `IndexError`. We need to raise `ValueError` when `k != k2`."
            ),
            wrong_diagnosis="The result must have matching dimensions; I'll raise when `n != p`.",
        ),
        BugSite(
            family="off_by_one",
            func="trace",
            correct="for i in range(len(m)))",
            buggy="for i in range(len(m) - 1))",
            wrong=("for i in range(len(m) - 1))", "for i in range(1, len(m)))"),
            snippet="from ${pkg}.${mod} import ${trace}\n\nprint(${trace}([[1, 2], [3, 4]]))\n",
            titles=("`${trace}` skips the last diagonal entry", "Wrong trace for 2x2 matrices"),
            symptoms=(
                "`${trace}` leaves out the bottom-right element of the diagonal.",
                "The trace of `[[1, 2], [3, 4]]` should be 5 but `${trace}` says otherwise.",
            ),
            diagnosis="`${trace}` iterates over `range(len(m) - 1)` and misses the last diagonal entry; it must use `range(len(m))`.",
            wrong_diagnosis="The indices probably should start at 1; I'll shift the range.",
        ),
        BugSite(
            family="missing_return",
            func="scale",
            correct="    return result\n",
            buggy="",
            wrong=(
                "        result.append([value * factor for value in row])\n",
                "        result.extend([[value * factor for value in row]])\n",
            ),
            snippet="from ${pkg}.${mod} import ${scale}\n\nprint(${scale}([[1, 2], [3, 4]], 10))\n",
            titles=("`${scale}` returns None", "Scaling a matrix gives None"),
            symptoms=(
                "`${scale}` builds the scaled matrix but the caller receives `None`.",
                "After `${scale}(m, 10)` I get `None` back instead of a matrix.",
            ),
            diagnosis="`${scale}` fills `result` but has no `return` statement, so it returns `None`.",
            wrong_diagnosis="The rows may not be added correctly; I'll extend the result with the new row instead.",
        ),
        BugSite(
            family="int_division",
            func="column_means",
            correct=") / rows for j",
            buggy=") // rows for j",
            wrong=("[sum(m[i][j] for i in range(rows)) // rows for j", "[float(sum(m[i][j] for i in range(rows)) // rows) for j"),
            snippet="from ${pkg}.${mod} import ${column_means}\n\nprint(${column_means}([[1, 2], [2, 4]]))\n",
            titles=("`${column_means}` rounds the means down", "Column means are integers"),
            symptoms=(
                "`${column_means}` returns integers and loses the fractional part.",
                "The mean of a column holding 1 and 2 is reported as 1.",
            ),
            diagnosis="`${column_means}` divides with `//`, truncating the mean. It must use `/`.",
            wrong_diagnosis="The docstring says floats, so I'll wrap the value in `float()`.",
        ),
    ),
)


CONFIG = ModuleTemplate(
    key="config",
    stems=("config", "settings", "conf", "ini"),
    names={
        "default_section": ("main", "general", "default", "core"),
        "ConfigError": ("ConfigError", "ParseError", "SettingsError"),
        "parse": ("parse", "parse_ini", "load_text", "read_settings"),
        "Config": ("Config", "Settings", "Options"),
        "get": ("get", "lookup", "value"),
        "get_int": ("get_int", "integer", "as_int"),
        "get_bool": ("get_bool", "flag", "as_bool"),
        "sections": ("sections", "section_names", "groups"),
    },
    exports=("Config", "ConfigError", "parse"),
    blurbs=("a small INI-style settings reader", "typed access to key = value configuration files"),
    source=r'''"""Read ``key = value`` settings grouped under ``[section]`` headers."""

DEFAULT_SECTION = "${default_section}"


class ${ConfigError}(ValueError):
    """A line that is neither a comment, a header nor ``key = value``."""


def ${parse}(text):
    """Parse INI-like ``text`` into ``{section: {key: value}}`` (keys lower-cased)."""
    data = {DEFAULT_SECTION: {}}
    section = DEFAULT_SECTION
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            data.setdefault(section, {})
            continue
        if "=" not in line:
            raise ${ConfigError}(f"line {number}: expected 'key = value', got {line!r}")
        key, value = line.split("=", 1)
        data[section][key.strip().lower()] = value.strip()
    return data


class ${Config}:
    """Typed access to parsed settings."""

    def __init__(self, text=""):
        self.data = ${parse}(text)

    def ${get}(self, key, section=DEFAULT_SECTION, default=None):
        return self.data.get(section, {}).get(key.lower(), default)

    def ${get_int}(self, key, section=DEFAULT_SECTION, default=0):
        value = self.${get}(key, section)
        return default if value is None else int(value)

    def ${get_bool}(self, key, section=DEFAULT_SECTION, default=False):
        value = self.${get}(key, section)
        if value is None:
            return default
        return value.lower() in ("1", "true", "yes", "on")

    def ${sections}(self):
        """Names of the explicit sections, sorted."""
        return sorted(name for name in self.data if name != DEFAULT_SECTION)
''',
    tests=r'''from ${pkg}.${mod} import ${Config}, ${ConfigError}

SAMPLE = """
# sample settings
name = demo
debug = True

[server]
Port = 8080
host = example.org

[cache]
size = 3
"""


def test_sections_are_separate():
    cfg = ${Config}(SAMPLE)
    assert cfg.${get_int}("port", section="server") == 8080
    assert cfg.${get}("port") is None


def test_sections_listed():
    assert ${Config}(SAMPLE).${sections}() == ["cache", "server"]


def test_get_bool():
    assert ${Config}(SAMPLE).${get_bool}("debug") is True


def test_missing_values_use_defaults():
    cfg = ${Config}(SAMPLE)
    assert cfg.${get_int}("retries") == 0
    assert cfg.${get_bool}("verbose") is False
    assert cfg.${get_bool}("verbose", default=True) is True


def test_bad_line_raises():
    try:
        ${Config}("just some words")
    except ${ConfigError}:
        return
    raise AssertionError("expected ${ConfigError}")
''',
    sites=(
        BugSite(
            family="wrong_dict_key",
            func="parse",
            correct="        data[section][key.strip().lower()] = value.strip()\n",
            buggy="        data[DEFAULT_SECTION][key.strip().lower()] = value.strip()\n",
            wrong=("            section = line[1:-1].strip()\n", "            section = line[1:-1].strip().lower()\n"),
            snippet=(
                "from ${pkg}.${mod} import ${Config}\n\n"
                'cfg = ${Config}("[server]\\nport = 8080\\n")\nprint(cfg.${get_int}("port", section="server"))\n'
            ),
            titles=("Values in sections are ignored", "`${Config}` puts every key in the default section"),
            symptoms=(
                "Keys defined under a `[section]` header cannot be read back from that section.",
                "Every setting ends up in the `${default_section}` section no matter which header it is under.",
            ),
            diagnosis=(
                "`${parse}` stores every key in `data[DEFAULT_SECTION]` instead of `data[section]`, so the "
                "current section header is ignored."
            ),
            wrong_diagnosis="Section names might differ in case; I'll lower-case them when parsing headers.",
        ),
        BugSite(
            family="wrong_string_method",
            func="get_bool",
            correct='        return value.lower() in ("1", "true", "yes", "on")\n',
            buggy='        return value.upper() in ("1", "true", "yes", "on")\n',
            wrong=('"1", "true", "yes", "on")', '"1", "true", "yes", "on", "y")'),
            snippet=(
                "from ${pkg}.${mod} import ${Config}\n\n"
                'cfg = ${Config}("debug = True\\n")\nprint(cfg.${get_bool}("debug"))\n'
            ),
            titles=("`${get_bool}` is always False", "Boolean settings are never true"),
            symptoms=(
                "`${get_bool}` returns `False` for `debug = True`.",
                "No spelling of a true value makes `${Config}.${get_bool}` return `True`.",
            ),
            diagnosis=(
                "`${get_bool}` upper-cases the value and compares it with lower-case words, so nothing ever "
                "matches. It must lower-case the value."
            ),
            wrong_diagnosis="The list of accepted words seems incomplete; I'll accept `y` as well.",
        ),
        BugSite(
            family="missing_none_check",
            func="get_bool",
            correct="        if value is None:\n            return default\n",
            buggy="",
            wrong=("        return value.lower() in (", "        return str(value).lower() in ("),
            snippet="from ${pkg}.${mod} import ${Config}\n\nprint(${Config}(\"\").${get_bool}(\"verbose\"))\n",
            titles=("`${get_bool}` crashes for missing keys", "AttributeError when a flag is not set"),
            symptoms=(
                "`${get_bool}` raises `AttributeError` for a key that is not in the file instead of returning the default.",
                "Reading an unset flag with `${Config}.${get_bool}` crashes.",
            ),
            diagnosis=(
                "`${get_bool}` calls `value.lower()` even when the key is missing and `value` is `None`; it "
                "has to return `default` in that case."
            ),
            wrong_diagnosis="Converting the value to a string first avoids calling `.lower()` on `None`.",
        ),
        BugSite(
            family="wrong_default",
            func="get_int",
            correct="def ${get_int}(self, key, section=DEFAULT_SECTION, default=0):",
            buggy="def ${get_int}(self, key, section=DEFAULT_SECTION, default=None):",
            wrong=(
                "        return default if value is None else int(value)\n",
                "        return int(value) if value else default\n",
            ),
            snippet="from ${pkg}.${mod} import ${Config}\n\nprint(${Config}(\"\").${get_int}(\"retries\"))\n",
            titles=("`${get_int}` returns None for missing keys", "Integer settings default to None"),
            symptoms=(
                "`${get_int}` returns `None` for a missing key, but integer settings should default to 0.",
                "An unset integer option comes back as `None` from `${get_int}`.",
            ),
            diagnosis="The `default` parameter of `${get_int}` is `None`; integer settings should default to 0.",
            wrong_diagnosis="The conversion probably mishandles empty values; I'll only convert truthy values.",
        ),
        BugSite(
            family="wrong_comparison",
            func="sections",
            correct="if name != DEFAULT_SECTION)",
            buggy="if name == DEFAULT_SECTION)",
            wrong=("if name == DEFAULT_SECTION)", "if name == DEFAULT_SECTION or not self.data[name])"),
            snippet=(
                "from ${pkg}.${mod} import ${Config}\n\n"
                'cfg = ${Config}("[db]\\nhost = x\\n[cache]\\nsize = 3\\n")\nprint(cfg.${sections}())\n'
            ),
            titles=("`${sections}` lists only the default section", "Wrong section names from `${sections}`"),
            symptoms=(
                "`${sections}` returns the implicit default section and none of the explicit ones.",
                "Explicit `[headers]` do not show up in `${Config}.${sections}()`.",
            ),
            diagnosis="`${sections}` keeps names equal to `DEFAULT_SECTION`; it should keep every other name (`!=`).",
            wrong_diagnosis="Empty sections should be listed too; I'll add them to the filter.",
        ),
        BugSite(
            family="exception_not_raised",
            func="parse",
            correct='        if "=" not in line:\n            raise ${ConfigError}(f"line {number}: expected \'key = value\', got {line!r}")\n',
            buggy="",
            wrong=('        key, value = line.split("=", 1)\n', '        key, value = (line.split("=", 1) + [""])[:2]\n'),
            snippet=(
                "from ${pkg}.${mod} import ${Config}, ${ConfigError}\n\n"
                'try:\n    ${Config}("just some words")\nexcept ${ConfigError} as exc:\n    print("${ConfigError}:", exc)\n'
            ),
            titles=("Malformed lines do not raise `${ConfigError}`", "Confusing ValueError for bad config lines"),
            symptoms=(
                "A line without `=` produces a generic unpacking `ValueError` instead of `${ConfigError}`.",
                "`${parse}` does not report malformed lines with `${ConfigError}` and the line number.",
            ),
            diagnosis=(
                "`${parse}` no longer checks for `=` before splitting, so a malformed line fails while "
                "unpacking. We need to raise `${ConfigError}` with the line number when `=` is missing."
            ),
            wrong_diagnosis="The unpacking should not crash on a line without `=`; I'll pad the split result.",
        ),
    ),
)


STATS = ModuleTemplate(
    key="stats",
    stems=("stats", "metrics", "numeric", "summary"),
    names={
        "mean": ("mean", "average", "arith_mean"),
        "median": ("median", "middle", "median_of"),
        "clamp": ("clamp", "bound", "limit"),
        "percent_change": ("percent_change", "pct_change", "growth_percent"),
        "moving_average": ("moving_average", "rolling_mean", "sliding_mean"),
    },
    exports=("mean", "median", "clamp", "percent_change", "moving_average"),
    blurbs=("descriptive statistics for lists of numbers", "small numeric helpers for reports"),
    source=r'''"""Descriptive statistics for plain lists of numbers."""


def ${mean}(values):
    """Arithmetic mean; ValueError for empty input."""
    if not values:
        raise ValueError("mean of empty data")
    return sum(values) / len(values)


def ${median}(values):
    """Middle value (mean of the two middle values for even lengths)."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median of empty data")
    mid = n // 2
    if n % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2


def ${clamp}(value, low, high):
    """Limit ``value`` to the closed range [low, high]."""
    if low > high:
        raise ValueError("low must not exceed high")
    return max(low, min(value, high))


def ${percent_change}(old, new):
    """Change from ``old`` to ``new`` in percent of ``old``."""
    if old == 0:
        raise ValueError("percent change from zero is undefined")
    return (new - old) / abs(old) * 100


def ${moving_average}(values, window=3):
    """Means of every run of ``window`` consecutive values."""
    return [${mean}(values[i : i + window]) for i in range(len(values) - window + 1)]
''',
    tests=r'''from ${pkg}.${mod} import ${clamp}, ${mean}, ${median}, ${moving_average}, ${percent_change}


def test_mean():
    assert ${mean}([1, 2]) == 1.5
    assert ${mean}([2, 4, 9]) == 5


def test_mean_of_nothing_raises():
    try:
        ${mean}([])
    except ValueError:
        return
    raise AssertionError("expected ValueError")


def test_median():
    assert ${median}([3, 1, 2]) == 2
    assert ${median}([4, 1, 3, 2]) == 2.5


def test_clamp():
    assert ${clamp}(5, 0, 10) == 5
    assert ${clamp}(-3, 0, 10) == 0
    assert ${clamp}(42, 0, 10) == 10


def test_percent_change():
    assert ${percent_change}(50, 75) == 50.0
    assert ${percent_change}(80, 60) == -25.0


def test_moving_average():
    assert ${moving_average}([1, 2, 3, 4]) == [2.0, 3.0]
    assert ${moving_average}([1, 2, 3, 4], window=2) == [1.5, 2.5, 3.5]
''',
    sites=(
        BugSite(
            family="int_division",
            func="mean",
            correct="    return sum(values) / len(values)\n",
            buggy="    return sum(values) // len(values)\n",
            wrong=("    return sum(values) // len(values)\n", "    return float(sum(values) // len(values))\n"),
            snippet="from ${pkg}.${mod} import ${mean}\n\nprint(${mean}([1, 2]))\n",
            titles=("`${mean}` truncates the result", "Mean of [1, 2] is 1"),
            symptoms=(
                "`${mean}` returns an integer that is rounded down instead of the exact mean.",
                "The mean of 1 and 2 is reported as 1 by `${mean}`.",
            ),
            diagnosis="`${mean}` uses floor division `//`, which truncates the mean; it must use `/`.",
            wrong_diagnosis="The mean should be a float; I'll convert the result with `float()`.",
        ),
        BugSite(
            family="exception_not_raised",
            func="mean",
            correct='    if not values:\n        raise ValueError("mean of empty data")\n',
            buggy="",
            wrong=("    return sum(values) / len(values)\n", '    if values is None:\n        raise ValueError("mean of empty data")\n    return sum(values) / len(values)\n'),
            snippet=(
                "from ${pkg}.${mod} import ${mean}\n\n"
                'try:\n    print(${mean}([]))\nexcept ValueError as exc:\n    print("ValueError:", exc)\n'
            ),
            titles=("`${mean}([])` raises ZeroDivisionError", "Empty input to `${mean}` gives the wrong error"),
            symptoms=(
                "`${mean}` of an empty list fails with `ZeroDivisionError` instead of the documented `ValueError`.",
                "We catch `ValueError` around `${mean}`, but empty data raises `ZeroDivisionError`.",
            ),
            diagnosis=(
                "`${mean}` divides by `len(values)` without first rejecting empty input, so it raises "
                "`ZeroDivisionError`. The docstring promises `ValueError` for empty input."
            ),
            wrong_diagnosis="The function should reject missing data; I'll raise `ValueError` when `values` is `None`.",
        ),
        BugSite(
            family="off_by_one",
            func="median",
            correct="    return (ordered[mid - 1] + ordered[mid]) / 2\n",
            buggy="    return (ordered[mid] + ordered[mid + 1]) / 2\n",
            wrong=("    if n % 2:\n", "    if n % 2 == 0:\n"),
            snippet="from ${pkg}.${mod} import ${median}\n\nprint(${median}([4, 1, 3, 2]))\n",
            titles=("`${median}` is wrong for even-length input", "Median of four numbers is off"),
            symptoms=(
                "For an even number of values, `${median}` averages the wrong pair of elements.",
                "`${median}([4, 1, 3, 2])` does not give 2.5.",
            ),
            diagnosis=(
                "For even lengths `${median}` averages `ordered[mid]` and `ordered[mid + 1]`; the two middle "
                "values are `ordered[mid - 1]` and `ordered[mid]`."
            ),
            wrong_diagnosis="The parity check looks inverted; I'll compare with zero explicitly.",
        ),
        BugSite(
            family="swapped_arguments",
            func="clamp",
            correct="    return max(low, min(value, high))\n",
            buggy="    return max(high, min(value, low))\n",
            wrong=("    return max(high, min(value, low))\n", "    return max(low, min(value, low))\n"),
            snippet="from ${pkg}.${mod} import ${clamp}\n\nprint(${clamp}(5, 0, 10))\n",
            titles=("`${clamp}` returns the upper bound for values in range", "`${clamp}(5, 0, 10)` is 10"),
            symptoms=(
                "`${clamp}` returns `high` for values that are already inside the range.",
                "Values between the bounds are not left alone by `${clamp}`.",
            ),
            diagnosis="`${clamp}` has `low` and `high` swapped: it should be `max(low, min(value, high))`.",
            wrong_diagnosis="The outer `max` should use `low`; I'll change that argument.",
        ),
        BugSite(
            family="swapped_arguments",
            func="percent_change",
            correct="    return (new - old) / abs(old) * 100\n",
            buggy="    return (old - new) / abs(old) * 100\n",
            wrong=("    return (old - new) / abs(old) * 100\n", "    return abs((old - new) / abs(old) * 100)\n"),
            snippet="from ${pkg}.${mod} import ${percent_change}\n\nprint(${percent_change}(50, 75))\n",
            titles=("`${percent_change}` has the wrong sign", "Growth is reported as a decline"),
            symptoms=(
                "`${percent_change}` reports an increase from 50 to 75 as a negative change.",
                "The sign of `${percent_change}` is flipped.",
            ),
            diagnosis="`${percent_change}` computes `old - new`; the change from `old` to `new` is `new - old`.",
            wrong_diagnosis="The sign is the problem, so I'll return the absolute value.",
        ),
        BugSite(
            family="off_by_one",
            func="moving_average",
            correct="for i in range(len(values) - window + 1)]",
            buggy="for i in range(len(values) - window)]",
            wrong=("values[i : i + window]", "values[i : i + window + 1]"),
            snippet="from ${pkg}.${mod} import ${moving_average}\n\nprint(${moving_average}([1, 2, 3, 4]))\n",
            titles=("`${moving_average}` drops the last window", "Moving average is one element short"),
            symptoms=(
                "The last full window is missing from the output of `${moving_average}`.",
                "`${moving_average}` returns one value fewer than there are windows.",
            ),
            diagnosis=(
                "`${moving_average}` iterates over `range(len(values) - window)`, one start position short; "
                "there are `len(values) - window + 1` windows."
            ),
            wrong_diagnosis="The windows look one value too narrow; I'll widen the slice.",
        ),
        BugSite(
            family="wrong_default",
            func="moving_average",
            correct="def ${moving_average}(values, window=3):",
            buggy="def ${moving_average}(values, window=2):",
            wrong=("for i in range(len(values) - window + 1)]", "for i in range(len(values) - window)]"),
            snippet="from ${pkg}.${mod} import ${moving_average}\n\nprint(${moving_average}([1, 2, 3, 4]))\n",
            titles=("Default window of `${moving_average}` is 2", "`${moving_average}` uses the wrong default window"),
            symptoms=(
                "Without an explicit window, `${moving_average}` averages pairs instead of triples.",
                "The default window of `${moving_average}` should be 3.",
            ),
            diagnosis="The default `window` of `${moving_average}` is 2; it should be 3.",
            wrong_diagnosis="There is one window too many in the output; I'll shorten the range.",
        ),
    ),
)


SEQUENCES = ModuleTemplate(
    key="sequences",
    stems=("sequences", "listutils", "seqtools", "paging"),
    names={
        "page_count": ("page_count", "num_pages", "count_pages"),
        "paginate": ("paginate", "page_of", "get_page"),
        "group_by": ("group_by", "bucket_by", "groups_of"),
        "dedupe": ("dedupe", "unique", "distinct"),
        "flatten": ("flatten", "flat", "unnest"),
    },
    exports=("page_count", "paginate", "group_by", "dedupe", "flatten"),
    blurbs=("helpers for paging, grouping and cleaning up lists", "list utilities for listings and reports"),
    source=r'''"""Helpers for paging, grouping and cleaning up lists."""


def ${page_count}(total, per_page=10):
    """Number of pages needed for ``total`` items."""
    if per_page <= 0:
        raise ValueError("per_page must be positive")
    return (total + per_page - 1) // per_page


def ${paginate}(items, page, per_page=10):
    """The items on 1-based ``page``; ValueError for pages below 1."""
    if page < 1:
        raise ValueError("pages are numbered from 1")
    start = (page - 1) * per_page
    return items[start : start + per_page]


def ${group_by}(items, key):
    """Map ``key(item)`` to the list of items with that key, in input order."""
    groups = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def ${dedupe}(items):
    """Items without repeats, keeping the first occurrence."""
    seen = set()
    kept = []
    for item in items:
        if item not in seen:
            seen.add(item)
            kept.append(item)
    return kept


def ${flatten}(nested):
    """Flatten nested lists and tuples into one list."""
    result = []
    for item in nested:
        if isinstance(item, (list, tuple)):
            result.extend(${flatten}(item))
        else:
            result.append(item)
    return result
''',
    tests=r'''from ${pkg}.${mod} import ${dedupe}, ${flatten}, ${group_by}, ${page_count}, ${paginate}

ITEMS = list(range(1, 26))


def test_page_count_rounds_up():
    assert ${page_count}(25) == 3
    assert ${page_count}(20) == 2
    assert ${page_count}(0) == 0


def test_paginate():
    assert ${paginate}(ITEMS, 1) == list(range(1, 11))
    assert ${paginate}(ITEMS, 3) == [21, 22, 23, 24, 25]
    assert ${paginate}(ITEMS, 2, per_page=5) == [6, 7, 8, 9, 10]


def test_page_zero_is_rejected():
    try:
        ${paginate}(ITEMS, 0)
    except ValueError:
        return
    raise AssertionError("expected ValueError")


def test_group_by_first_letter():
    groups = ${group_by}(["apple", "avocado", "banana"], key=lambda w: w[0])
    assert groups == {"a": ["apple", "avocado"], "b": ["banana"]}


def test_dedupe_keeps_first():
    assert ${dedupe}([3, 1, 3, 2, 1]) == [3, 1, 2]


def test_flatten():
    assert ${flatten}([1, [2, (3, 4)], [[5]]]) == [1, 2, 3, 4, 5]
''',
    sites=(
        BugSite(
            family="off_by_one",
            func="page_count",
            correct="    return (total + per_page - 1) // per_page\n",
            buggy="    return total // per_page\n",
            wrong=("    return total // per_page\n", "    return (total + 1) // per_page\n"),
            snippet="from ${pkg}.${mod} import ${page_count}\n\nprint(${page_count}(25))\n",
            titles=("`${page_count}` forgets the last partial page", "25 items fit on 2 pages?"),
            symptoms=(
                "`${page_count}` rounds down, so the last partially filled page is not counted.",
                "With 25 items and 10 per page, `${page_count}` reports one page too few.",
            ),
            diagnosis=(
                "`${page_count}` uses `total // per_page`, which rounds down; a partial last page needs a "
                "ceiling division: `(total + per_page - 1) // per_page`."
            ),
            wrong_diagnosis="Adding one item before dividing should account for the remainder.",
        ),
        BugSite(
            family="off_by_one",
            func="paginate",
            correct="    start = (page - 1) * per_page\n",
            buggy="    start = page * per_page\n",
            wrong=("    return items[start : start + per_page]\n", "    return items[start - 1 : start + per_page - 1]\n"),
            snippet="from ${pkg}.${mod} import ${paginate}\n\nprint(${paginate}(list(range(1, 26)), 1))\n",
            titles=("`${paginate}` skips the first page", "Page 1 shows the items of page 2"),
            symptoms=(
                "`${paginate}(items, 1)` returns the second page of items.",
                "Pages are 1-based according to the docs, but `${paginate}` treats them as 0-based.",
            ),
            diagnosis=(
                "Pages are 1-based, but `${paginate}` computes `start = page * per_page`, which skips a "
                "whole page. It must be `(page - 1) * per_page`."
            ),
            wrong_diagnosis="The slice seems shifted by one item; I'll move both ends back by one.",
        ),
        BugSite(
            family="exception_not_raised",
            func="paginate",
            correct='    if page < 1:\n        raise ValueError("pages are numbered from 1")\n',
            buggy="",
            wrong=("    start = (page - 1) * per_page\n", '    if page < 0:\n        raise ValueError("pages are numbered from 1")\n    start = (page - 1) * per_page\n'),
            snippet=(
                "from ${pkg}.${mod} import ${paginate}\n\n"
                'try:\n    print(${paginate}([1, 2, 3], 0))\nexcept ValueError as exc:\n    print("ValueError:", exc)\n'
            ),
            titles=("`${paginate}` accepts page 0", "No error for invalid page numbers"),
            symptoms=(
                "`${paginate}` with page 0 silently returns an empty list instead of raising `ValueError`.",
                "Invalid page numbers below 1 are not rejected by `${paginate}`.",
            ),
            diagnosis="`${paginate}` no longer rejects pages below 1 as its docstring promises; it must raise `ValueError` for `page < 1`.",
            wrong_diagnosis="Negative pages should be rejected; I'll raise for `page < 0`.",
        ),
        BugSite(
            family="wrong_default",
            func="paginate",
            correct="def ${paginate}(items, page, per_page=10):",
            buggy="def ${paginate}(items, page, per_page=20):",
            wrong=("def ${page_count}(total, per_page=10):", "def ${page_count}(total, per_page=20):"),
            snippet="from ${pkg}.${mod} import ${paginate}\n\nprint(len(${paginate}(list(range(50)), 1)))\n",
            titles=("`${paginate}` returns 20 items per page by default", "Default page size mismatch"),
            symptoms=(
                "By default `${paginate}` returns 20 items per page, while `${page_count}` assumes 10.",
                "The default page size of `${paginate}` is not 10.",
            ),
            diagnosis="The default `per_page` of `${paginate}` is 20, inconsistent with `${page_count}`; it should be 10.",
            wrong_diagnosis="The two defaults disagree; I'll align `${page_count}` with `${paginate}`.",
        ),
        BugSite(
            family="wrong_dict_key",
            func="group_by",
            correct="groups.setdefault(key(item), [])",
            buggy="groups.setdefault(item, [])",
            wrong=("groups.setdefault(item, [])", "groups.setdefault(str(item), [])"),
            snippet=(
                "from ${pkg}.${mod} import ${group_by}\n\n"
                'print(${group_by}(["apple", "avocado", "banana"], key=lambda w: w[0]))\n'
            ),
            titles=("`${group_by}` ignores the key function", "Grouping puts every item in its own group"),
            symptoms=(
                "`${group_by}` creates one group per item instead of grouping by `key(item)`.",
                "The `key` argument of `${group_by}` has no effect.",
            ),
            diagnosis="`${group_by}` uses the item itself as the dictionary key instead of `key(item)`.",
            wrong_diagnosis="Unhashable items might be the issue; I'll use the string form of the item as key.",
        ),
        BugSite(
            family="missing_return",
            func="dedupe",
            correct="    return kept\n",
            buggy="",
            wrong=("    seen = set()\n", "    seen = set(items[:0])\n"),
            snippet="from ${pkg}.${mod} import ${dedupe}\n\nprint(${dedupe}([3, 1, 3, 2, 1]))\n",
            titles=("`${dedupe}` returns None", "Deduplicated list is missing"),
            symptoms=(
                "`${dedupe}` always returns `None`.",
                "I get `None` back from `${dedupe}` instead of the list without repeats.",
            ),
            diagnosis="`${dedupe}` builds the `kept` list but never returns it.",
            wrong_diagnosis="The `seen` set may be shared; I'll build it from an empty slice of the input.",
        ),
        BugSite(
            family="wrong_method",
            func="flatten",
            correct="            result.extend(${flatten}(item))\n",
            buggy="            result.append(${flatten}(item))\n",
            wrong=("            result.append(item)\n", "            result.extend([item])\n"),
            snippet="from ${pkg}.${mod} import ${flatten}\n\nprint(${flatten}([1, [2, (3, 4)], [[5]]]))\n",
            titles=("`${flatten}` keeps nested lists", "Nested lists are not flattened"),
            symptoms=(
                "`${flatten}` leaves the nested lists in place instead of flattening them.",
                "The output of `${flatten}` still contains lists.",
            ),
            diagnosis=(
                "`${flatten}` appends the flattened sub-list as a single element; it should `extend` the "
                "result with it."
            ),
            wrong_diagnosis="Plain items should be added through `extend` as well.",
        ),
    ),
)

TEMPLATES: tuple[ModuleTemplate, ...] = (TEXT, INVENTORY, SCHEDULER, MATRIX, CONFIG, STATS, SEQUENCES)
"""Every module template, in a fixed order."""

PACKAGE_PREFIXES = ("tiny", "micro", "easy", "little", "quick", "neat", "plain", "handy", "mini", "simple")
PACKAGE_NOUNS = ("kit", "tools", "box", "lab", "bench", "works", "craft", "base", "forge", "yard")

RUN_TESTS = r'''"""Run the tests (plain test_* functions): python run_tests.py [PATH ...]"""

import importlib.util
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def collect(args):
    paths = []
    for arg in args or ["tests"]:
        path = (ROOT / arg).resolve()
        if path.is_dir():
            paths.extend(sorted(path.glob("test_*.py")))
        elif path.is_file():
            paths.append(path)
        else:
            print(f"ERROR: file or directory not found: {arg}")
            sys.exit(4)
    return paths


def load(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def where(exc):
    lines = []
    for frame in traceback.extract_tb(exc.__traceback__)[1:]:
        name = Path(frame.filename)
        if ROOT in name.parents:
            lines.append(f"{name.relative_to(ROOT).as_posix()}:{frame.lineno}: in {frame.name}")
            lines.append(f"    {frame.line}")
    return lines


def main(args):
    sys.path.insert(0, str(ROOT))
    passed, failures = 0, []
    for path in collect(args):
        rel = path.relative_to(ROOT).as_posix()
        for name, func in vars(load(path)).items():
            if not (name.startswith("test_") and callable(func)):
                continue
            try:
                func()
            except Exception as exc:
                failures.append((f"{rel}::{name}", exc))
                print(f"{rel}::{name} FAILED")
            else:
                passed += 1
                print(f"{rel}::{name} PASSED")
    for test_id, exc in failures:
        print(f"\n____ {test_id} ____")
        print("\n".join(where(exc)))
        print(f"{type(exc).__name__}: {exc}".rstrip(": "))
    print(f"\n{passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''
"""The repository's own test runner (stdlib only, deterministic output, no timings)."""

TEST_COMMAND = "python run_tests.py"
"""The shell command the ``run_tests`` tool runs (with an optional path argument)."""
