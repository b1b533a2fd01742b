"""Named SQL statements, loaded once from the ``sql/*.sql`` files shipped in the package.

A file (``sql/<module>.sql``; ``sql/operations/<module>.sql`` for the modules of ``ops/operations/``) holds
blocks that start with ``-- name: <name>``; a name is unique across all files. ``{schema}`` stands for the
schema name and is replaced by a quoted :class:`psycopg.sql.Identifier` — never by string formatting — so a
schema name cannot change a statement. A block whose name starts with ``_`` is a fragment, not a statement:
``{_name}`` in any block stands for its text (the conditions or CTEs several statements share, written
once). Everything else in the text is literal SQL (braces included).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

from psycopg import sql

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_FRAGMENT = re.compile(r"\{(_\w+)\}")


def _sql_files(folder: Traversable) -> Iterator[Traversable]:
    """The ``.sql`` files under ``folder`` and its subfolders (``sql/operations/*.sql``), in name order."""
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.is_dir():
            yield from _sql_files(entry)
        elif entry.name.endswith(".sql"):
            yield entry


@cache
def _raw() -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in _sql_files(resources.files(__package__).joinpath("sql")):
        parts = _NAME.split(entry.read_text(encoding="utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in out:
                raise RuntimeError(f"query {name!r} is defined twice")
            # Comment lines and indentation are for readers of the .sql files, not for the server:
            # dropping them keeps statements under psycopg's 4 KiB parse cache (a longer one is parsed
            # again on every call: 0.15 ms of each LangGraph get_tuple when snapshot_read was 4,225 bytes).
            # No statement has a string literal that spans lines, so stripping each line is safe.
            code = "\n".join(
                line.strip() for line in body.splitlines() if not line.lstrip().startswith("--")
            )
            out[name] = code.strip().rstrip(";")
    fragments = {name: code for name, code in out.items() if name.startswith("_")}

    def expand(code: str, seen: tuple[str, ...]) -> str:
        def one(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in fragments or name in seen:
                raise RuntimeError(f"unknown or circular SQL fragment {{{name}}} (in {seen[0]!r})")
            return expand(fragments[name], (*seen, name))

        return _FRAGMENT.sub(one, code)

    return {name: expand(code, (name,)) for name, code in out.items() if not name.startswith("_")}


def with_schema(text: str, schema: str) -> sql.Composed:
    """Compose SQL text, replacing each ``{schema}`` with the quoted identifier."""
    pieces = text.split("{schema}")
    parts: list[sql.Composable] = [sql.SQL(pieces[0])]
    for piece in pieces[1:]:
        parts += [sql.Identifier(schema), sql.SQL(piece)]
    return sql.Composed(parts)


@cache
def query(name: str, schema: str, subs: tuple[tuple[str, str], ...] = ()) -> bytes:
    """The statement ``name`` for ``schema``, rendered once and cached as bytes: psycopg would otherwise
    render a composed statement again on every execution (15 us for the larger ones). ``subs`` replace
    ``{placeholder}``s with SQL fragments chosen by the core (see :class:`~pgagentstate.ops.base.Stmt`)."""
    text = _raw()[name]
    for placeholder, fragment in subs:
        text = text.replace("{" + placeholder + "}", fragment)
    return with_schema(text, schema).as_bytes(None)


_WRITES = re.compile(r"\b(insert|update|delete|merge|truncate|nextval|setval|pg_notify)\b", re.IGNORECASE)


@cache
def reads_only(name: str) -> bool:
    """True when statement ``name`` only reads (a SELECT that modifies nothing, locks nothing): running it
    again after its connection broke cannot repeat an effect. Conservative: ``FOR UPDATE`` counts as a
    write, and so does any mention of a data-modifying keyword."""
    text = _raw()[name].lstrip().lower()
    return text.startswith(("select", "with")) and _WRITES.search(text) is None


def names() -> list[str]:
    return sorted(_raw())
