"""The ``docs`` claim's patterns, path-aware: ``*`` and ``?`` stay within one ``/`` segment,
``**`` crosses segments, ``[abc]`` / ``[!abc]`` are classes (never matching ``/``). A lone ``*``
is every document, as it always was (what ``tether token`` mints by default).

``fnmatch`` lets ``*`` cross ``/``: a token for ``team/*`` opened ``team/secret/plans`` too.
Pure; compiled patterns are cached (tokens are signed, so patterns come from the issuer).
"""

from __future__ import annotations

import functools
import re

EVERYTHING = "*"
_CLASS_SPECIALS = str.maketrans({"\\": r"\\", "[": r"\[", "&": r"\&", "~": r"\~", "|": r"\|"})


def matches(document: str, pattern: str) -> bool:
    return pattern == EVERYTHING or _compiled(pattern).fullmatch(document) is not None


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                out.append(".*")
                i += 2
                while i < n and pattern[i] == "*":
                    i += 1  # "***" is "**"
            else:
                out.append("[^/]*")
                i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            if body.startswith("!"):
                out.append("[^/" + body[1:].translate(_CLASS_SPECIALS) + "]")
            else:
                body = ("\\" + body if body.startswith("^") else body).translate(_CLASS_SPECIALS)
                out.append("(?!/)[" + body + "]")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out), re.DOTALL)
