"""An optional sanitiser for text that reaches prompts: control characters and HTML.

Off by default: stored payloads round-trip exactly. Turn it on per store for the events it appends
(``StateStore(..., sanitizer=Sanitizer())``) or call :func:`Sanitizer.clean` on text before a prompt.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

_TAGS = re.compile(r"<\s*(script|style)\b[^>]*>.*?<\s*/\s*\1\s*>|<[^>]+>", re.IGNORECASE | re.DOTALL)
_KEEP = {"\n", "\t"}


@dataclass(frozen=True)
class Sanitizer:
    """``control``: drop control and format characters (NUL, escapes, bidi overrides) but newlines and
    tabs; ``html``: drop tags (and script/style bodies), unescape entities; ``max_length``: truncate;
    ``normalize``: Unicode NFKC (folds look-alike characters)."""

    control: bool = True
    html: bool = True
    max_length: int | None = None
    normalize: bool = False

    def clean(self, text: str) -> str:
        if self.html:
            text = html.unescape(_TAGS.sub("", text))
        if self.normalize:
            text = unicodedata.normalize("NFKC", text)
        if self.control:
            text = "".join(c for c in text if c in _KEEP or unicodedata.category(c) not in ("Cc", "Cf"))
        if self.max_length is not None:
            text = text[: self.max_length]
        return text

    def clean_value(self, value: Any) -> Any:
        """Every string inside a JSON value (keys are left as they are)."""
        if isinstance(value, str):
            return self.clean(value)
        if isinstance(value, dict):
            return {k: self.clean_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.clean_value(v) for v in value]
        return value
