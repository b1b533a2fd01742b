"""Full-text search terms for long-term memory, built here rather than by the server's parser.

The server's ``simple`` configuration lowercases only in the database's locale (ASCII in ``C``), does not
normalise Unicode (``Café`` typed as ``e`` + U+0301 never meets ``Café`` typed as one code point) and
keeps a run of Japanese, Chinese or Thai text as one word, so ``太郎`` is not found in ``私の名前は太郎です``.
Here, on every server alike:

- text is NFKC-normalised and case-folded (``Ｃａｆé`` = ``café``, decomposed Hangul and kana = composed);
- a word is a run of letters, digits, ``_`` and combining marks;
- inside a word, each character of a script written without spaces (Han, kana, Hangul, Thai, Lao,
  Khmer, Myanmar) is a term of its own, and the other runs (a Latin word inside Japanese text) are terms
  too; a query word in such a script becomes a phrase of its characters, so it matches wherever those
  characters stand side by side — a substring match, as ADK's in-memory service does for them.

Memories store the terms as a ``tsvector`` (with positions, for the phrases) under a GIN index; a query is
one ``tsquery`` per distinct word and ranks by how many of them an item matches. :func:`local_matches`
does the same in Python for encrypted values, which the server cannot read.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Sequence
from typing import Any

# Scripts written without spaces between words (ranges of their letters).
_UNSPACED = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x1780, 0x17FF),  # Khmer
    (0x2E80, 0x2FDF),  # CJK radicals
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3021, 0x3029),
    (0x3038, 0x303C),
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3130, 0x318F),  # Hangul compatibility Jamo
    (0x31F0, 0x31FF),
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA960, 0xA97F),
    (0xAC00, 0xD7FF),  # Hangul syllables
    (0xF900, 0xFAFF),
    (0xFF66, 0xFF9F),  # half-width katakana (NFKC makes them full-width anyway)
    (0x20000, 0x3FFFF),
)
# Postgres bounds: a lexeme under 2 KiB, positions up to 16383, at most 256 positions per lexeme.
_MAX_LEXEME_BYTES = 2046
_MAX_POSITION = 16383
_MAX_POSITIONS = 256
# A query of hundreds of distinct words is a pasted document, not a question: rank by the first ones.
MAX_QUERY_WORDS = 64


def _unspaced(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _UNSPACED)


def normalize(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_" or unicodedata.category(ch)[0] == "M"


# ASCII text (most of it): NFKC changes nothing, casefold is lower(), a word is a run of [a-z0-9_] and a
# word is one term. A regex finds them ~10x faster than the loop below (12 words: 95 -> 9 us per value).
_ASCII_WORD = re.compile(r"[a-z0-9_]+")


def words(text: str) -> Iterator[list[str]]:
    """The words of ``text``, each as the list of terms it is made of (usually one)."""
    if text.isascii():
        for term in _ASCII_WORD.findall(text.lower()):
            yield [term]
        return
    text = normalize(text)
    terms: list[str] = []
    run: list[str] = []
    for ch in text:
        if not _is_word_char(ch):
            if run:
                terms.append("".join(run))
                run = []
            if terms:
                yield terms
                terms = []
            continue
        if unicodedata.category(ch)[0] == "M" and (run or terms):
            # A combining mark belongs to the character before it (Thai vowels, dakuten left over).
            if run:
                run.append(ch)
            else:
                terms[-1] += ch
        elif _unspaced(ch):
            if run:
                terms.append("".join(run))
                run = []
            terms.append(ch)
        else:
            run.append(ch)
    if run:
        terms.append("".join(run))
    if terms:
        yield terms


def strings(value: Any) -> Iterator[str]:
    """Every string value inside a JSON value (object keys are not searched)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from strings(v)


def _fits(term: str) -> bool:
    return len(term.encode()) <= _MAX_LEXEME_BYTES


def positions(value: Any) -> dict[str, list[int]]:
    """term -> its positions (from 1) in the strings of ``value``; separate strings are never adjacent."""
    out: dict[str, list[int]] = {}
    pos = 0
    for text in strings(value):
        for word in words(text):
            for term in word:
                pos += 1
                if _fits(term):
                    out.setdefault(term, []).append(min(pos, _MAX_POSITION))
        pos += 1  # a gap: a phrase does not run from one string into the next
    return out


def _quote(term: str) -> str:
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def tsvector(value: Any) -> str:
    """The ``tsvector`` literal of a memory value's terms ('' when it has none)."""
    parts = []
    for term, where in positions(value).items():
        uniq = sorted(set(where))[:_MAX_POSITIONS]
        parts.append(_quote(term) + ":" + ",".join(map(str, uniq)))
    return " ".join(parts)


def query_words(query: str) -> list[tuple[str, ...]]:
    """The distinct words of a query (each a tuple of terms), in order, at most :data:`MAX_QUERY_WORDS`."""
    seen: dict[tuple[str, ...], None] = {}
    for word in words(query):
        terms = tuple(t for t in word if _fits(t))
        if terms:
            seen.setdefault(terms, None)
        if len(seen) >= MAX_QUERY_WORDS:
            break
    return list(seen)


def tsquery(word: Sequence[str]) -> str:
    """The ``tsquery`` literal of one query word: a term, or a phrase of its terms."""
    return " <-> ".join(_quote(t) for t in word)


def local_matches(value: Any, query: Sequence[Sequence[str]]) -> int:
    """How many of the query words ``value`` contains: what the server computes, for encrypted values."""
    where = {term: set(p) for term, p in positions(value).items()}
    hits = 0
    for word in query:
        first = where.get(word[0])
        if not first:
            continue
        rest = [where.get(t, set()) for t in word[1:]]
        if any(all(start + i + 1 in ps for i, ps in enumerate(rest)) for start in first):
            hits += 1
    return hits
