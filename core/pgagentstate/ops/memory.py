"""Long-term memory: namespaced key/value items with TTL and full-text search."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from .. import arguments, textsearch
from ..codec import check_id, check_text, encode
from ..errors import InvalidId, InvalidInput, VersionConflict
from ..models import Memory
from ..sealing import seal
from . import memory_index
from .base import Ctx, Op, count, json_rows, many, one
from .memory_rows import SEP, contains, memory_ad, memory_from_row, ns_path, word_params

# The greatest code point: every path that starts with a prefix sorts below prefix + this (C collation).
_TOP = "\U0010ffff"


def check_namespace(
    ctx: Ctx, namespace: Sequence[str], *, wildcards: bool = False, allow_empty: bool = False
) -> tuple[str, ...]:
    if isinstance(namespace, str) or not isinstance(namespace, Sequence):
        raise InvalidId("namespace must be a sequence of strings", path="namespace")
    labels = tuple(namespace)
    if not labels and not allow_empty:
        raise InvalidId("namespace must not be empty", path="namespace")
    for i, label in enumerate(labels):
        check_id(label, f"namespace[{i}]", ctx.limits)
        if SEP in label:
            raise InvalidId("namespace labels must not contain U+001F", path=f"namespace[{i}]")
        if label == "*" and not wildcards:
            raise InvalidId("'*' is only allowed in namespace patterns", path=f"namespace[{i}]")
    # The joined namespace is one column of the memory tables' primary keys, next to the tenant, the key
    # (and a field): bound in bytes here, or Postgres refuses the index row after the work was done.
    size = len(ns_path(labels).encode())
    if size > 2 * ctx.limits.max_id_length:
        raise InvalidId(
            f"namespace is {size} bytes long ({len(labels)} labels, UTF-8, with separators); "
            f"the limit is {2 * ctx.limits.max_id_length}",
            path="namespace",
        )
    return labels


def pattern_params(prefix: Sequence[str] | None, suffix: Sequence[str] | None) -> dict[str, Any]:
    """Index range for the literal part of ``prefix``, plus a regex when wildcards or a suffix remain."""
    prefix = tuple(prefix or ())
    suffix = tuple(suffix or ())
    literal: list[str] = []
    for label in prefix:
        if label == "*":
            break
        literal.append(label)
    lo = ns_path(literal)
    regex = None
    if len(literal) < len(prefix) or suffix:

        def part(label: str) -> str:
            return f"[^{SEP}]+{SEP}" if label == "*" else re.escape(label) + SEP

        head = "".join(part(label) for label in prefix)
        tail = "".join(part(label) for label in suffix)
        regex = f"^{head}(.*{SEP})?{tail}$" if suffix else f"^{head}"
        if suffix and prefix:
            # A namespace that is both (prefix...) and (...suffix) may share labels between the two.
            regex = f"^(?=({head})).*{tail}$"
    return {"prefix_lo": lo, "prefix_hi": lo + _TOP, "ns_regex": regex}


def terms(ctx: Ctx, value: Mapping[str, Any]) -> str | None:
    """The search terms stored with a value; none for an encrypted one (they would give away its words)."""
    return None if ctx.cipher is not None else textsearch.tsvector(value)


Index = bool | Sequence[str] | None
#: ``auto``: hybrid when the store has a memory index, else text; ``text``: full-text only; ``vector``: by
#: meaning only (LangGraph's semantics); ``hybrid``: both, fused by reciprocal rank.
SEARCH_MODES = ("auto", "text", "rank", "vector", "hybrid")
Item = tuple[Sequence[str], str, Mapping[str, Any]] | tuple[Sequence[str], str, Mapping[str, Any], Index]


def entry(ctx: Ctx, namespace: Sequence[str], key: str, value: Any, index: Index, path: str) -> memory_index.Entry:
    labels = check_namespace(ctx, namespace)
    check_id(key, f"{path}.key" if path != "value" else "key", ctx.limits)
    if not isinstance(value, Mapping):
        raise InvalidInput(f"memory value must be a mapping, not {type(value).__name__}", path=path)
    texts = memory_index.texts_for(ctx, value, index, path=f"{path}.index") if ctx.memory_index else {}
    return memory_index.Entry(
        ns_path=ns_path(labels),
        key=key,
        labels=labels,
        value=seal(ctx.cipher, dict(value), ctx.limits, memory_ad(ctx, labels, key), path=path),
        terms=terms(ctx, value),
        texts=texts,
    )


def _check_ttl(ttl: float | None) -> float | None:
    return arguments.optional_duration(ttl, "ttl")


def put(
    ctx: Ctx,
    namespace: Sequence[str],
    key: str,
    value: Mapping[str, Any],
    *,
    ttl: float | None,
    user_id: str,
    expected_version: int | None,
    index: Index = None,
) -> Op[Memory]:
    check_text(user_id, "user_id", ctx.limits)
    ttl = _check_ttl(ttl)
    arguments.optional_integer(expected_version, "expected_version")
    e = entry(ctx, namespace, key, value, index, "value")
    if ctx.memory_index is not None:
        rows = yield from memory_index.write(
            ctx, [e], ttl=ttl, user_id=user_id, if_absent=False, expected_version=expected_version
        )
        row = rows[0] if rows else None
    else:
        params = {
            "ns_path": e.ns_path,
            "namespace": list(e.labels),
            "key": key,
            "user_id": user_id,
            "value": e.value,
            "terms": e.terms,
            "ttl": ttl,
            "expected_version": expected_version,
        }
        row = yield from one("memory_cas" if expected_version else "memory_put", **params)
    if row:
        return memory_from_row(ctx, row)
    current = yield from one("memory_version", ns_path=e.ns_path, key=key)
    raise VersionConflict(expected_version, current[0] if current else 0, what=f"memory {key!r} version")


def put_many(
    ctx: Ctx,
    items: Sequence[Item],
    *,
    ttl: float | None,
    user_id: str,
    if_absent: bool,
) -> Op[int]:
    """Store many items in one statement (and their embeddings, with an index); returns how many were
    written. An item may carry a fourth element, its ``index`` (False, None or field paths)."""
    check_text(user_id, "user_id", ctx.limits)
    ttl = _check_ttl(ttl)
    entries: list[memory_index.Entry] = []
    for i, item in enumerate(items):
        if not isinstance(item, tuple | list) or len(item) not in (3, 4):
            raise InvalidInput("an item is (namespace, key, value) or (namespace, key, value, index)",
                               path=f"items[{i}]")
        index: Index = item[3] if len(item) == 4 else None
        entries.append(entry(ctx, item[0], item[1], item[2], index, f"items[{i}]"))
    if len({(e.ns_path, e.key) for e in entries}) != len(entries):
        raise InvalidInput("the same namespace and key appear twice in one batch", path="items")
    if not entries:
        return 0
    if ctx.memory_index is not None:
        rows = yield from memory_index.write(
            ctx, entries, ttl=ttl, user_id=user_id, if_absent=if_absent, expected_version=None
        )
        return len(rows)
    return (yield from write_plain(ctx, entries, ttl=ttl, user_id=user_id, if_absent=if_absent))


def write_plain(
    ctx: Ctx, entries: Sequence[memory_index.Entry], *, ttl: float | None, user_id: str, if_absent: bool
) -> Op[int]:
    """Write items without embeddings (a store without a memory index), in one statement."""
    del ctx
    return (
        yield from count(
            "memory_put_many",
            items=json_rows(memory_index.item_row(e) for e in entries),
            user_id=user_id,
            ttl=ttl,
            if_absent=if_absent,
        )
    )


def get(ctx: Ctx, namespace: Sequence[str], key: str, *, refresh_ttl: bool) -> Op[Memory | None]:
    labels = check_namespace(ctx, namespace)
    row = yield from one(
        "memory_get", ns_path=ns_path(labels), key=check_id(key, "key", ctx.limits), refresh=refresh_ttl
    )
    return memory_from_row(ctx, row) if row else None


def delete(ctx: Ctx, namespace: Sequence[str], key: str) -> Op[bool]:
    labels = check_namespace(ctx, namespace)
    n = yield from count("memory_delete", ns_path=ns_path(labels), key=check_id(key, "key", ctx.limits))
    return bool(n)


def search(
    ctx: Ctx,
    prefix: Sequence[str],
    *,
    query: str | None,
    filter: Mapping[str, Any] | None,
    user_id: str | None,
    limit: int,
    offset: int,
    refresh_ttl: bool,
    mode: str = "auto",
) -> Op[list[Memory]]:
    labels = check_namespace(ctx, prefix, wildcards=True, allow_empty=True)
    if query is not None and not isinstance(query, str):
        raise InvalidInput("query must be a string", path="query")
    arguments.integer(limit, "limit")
    arguments.integer(offset, "offset")
    if mode not in SEARCH_MODES:
        raise InvalidInput(f"mode must be one of {', '.join(SEARCH_MODES)}, not {mode!r}", path="mode")
    if mode in ("vector", "hybrid") and ctx.memory_index is None:
        raise InvalidInput(f"a {mode} search needs a store with a memory index (memory_index=...)", path="mode")
    if mode == "auto":
        mode = "hybrid" if ctx.memory_index is not None else "text"
    blank = query is None or not query.strip()
    words = None if blank else textsearch.query_words(query or "")
    filter_json = None if filter is None else encode(dict(filter), ctx.limits, path="filter")
    # "rank": the query orders the items without hiding any (LangGraph's stores without an index ignore
    # the query: every item of the namespace comes back); "text": only the items with one of its words.
    keep = mode == "rank"
    if mode not in ("text", "rank") and not blank:
        return (
            yield from memory_index.search(
                ctx,
                query=query or "",
                words=words if mode == "hybrid" else None,
                pattern=pattern_params(labels, None),
                user_id=user_id,
                filter_json=filter_json,
                filter=filter,
                limit=limit,
                offset=offset,
                refresh_ttl=refresh_ttl,
            )
        )
    if words == []:
        if not keep:
            return []  # a query without a word ("!?") matches nothing
        words = None  # ... and ranks nothing
    if ctx.cipher is not None and (words is not None or filter is not None):
        # The server cannot search or compare ciphertexts: filter and rank the decrypted items here.
        rows = yield from many(
            "memory_list",
            replica=not refresh_ttl,
            **pattern_params(labels, None),
            user_id=user_id,
            added=words is not None,
            filter=None,
            limit=None,
            offset=0,
            refresh=refresh_ttl,
        )
        found = [memory_from_row(ctx, r) for r in rows]
        return local_search(found, words, filter, keep=keep)[offset : offset + limit]
    scope: dict[str, Any] = {**pattern_params(labels, None), "user_id": user_id, "filter": filter_json}
    page: dict[str, Any] = {"limit": limit, "offset": offset, "refresh": refresh_ttl}
    if words is None:
        rows = yield from many("memory_list", replica=not refresh_ttl, **scope, **page, added=False)
    else:
        rows = yield from many(
            "memory_rank" if keep else "memory_search",
            replica=not refresh_ttl,
            custom_plan=True,  # the range or the full-text index: which one depends on the values
            **scope,
            **page,
            **word_params(words),
        )
    return [memory_from_row(ctx, r) for r in rows]


def local_search(
    items: list[Memory], words: list[tuple[str, ...]] | None, filter: Mapping[str, Any] | None, *,
    keep: bool = False,
) -> list[Memory]:
    """What memory_search does in SQL, for encrypted values: containment filter, items ranked by the share
    of the query's words they contain (``keep``: also those with none, ranked 0), equal ranks in the order
    the server listed them (with a query: the order first stored, as in SQL)."""
    if filter is not None:
        items = [m for m in items if contains(m.value, dict(filter))]
    if words is None:
        return items
    scored = []
    for m in items:
        hits = textsearch.local_matches(m.value, words)
        if hits or keep:
            scored.append(replace(m, score=hits / len(words)))
    return sorted(scored, key=lambda m: -(m.score or 0))


def namespaces(
    ctx: Ctx,
    *,
    prefix: Sequence[str] | None,
    suffix: Sequence[str] | None,
    max_depth: int | None,
    limit: int,
    offset: int,
) -> Op[list[tuple[str, ...]]]:
    pre = check_namespace(ctx, prefix or (), wildcards=True, allow_empty=True)
    suf = check_namespace(ctx, suffix or (), wildcards=True, allow_empty=True)
    params: dict[str, Any] = {
        "max_depth": arguments.optional_integer(max_depth, "max_depth"),
        "limit": arguments.integer(limit, "limit"),
        "offset": arguments.integer(offset, "offset"),
    }
    rows = yield from many("memory_namespaces", **pattern_params(pre, suf), **params)
    return [tuple(r[0]) for r in rows]
