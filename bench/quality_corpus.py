"""The quality bench's cases: prose nobody on the team wrote, cut where editors pause.

Documents are read offline from what this machine already has: the long descriptions in
installed packages' ``METADATA`` files and the README/NEWS-style text under ``/usr/share/doc``.
Only their prose paragraphs are cut (no code, tables, badges or link lists), at three kinds
of cursor position, each after the whitespace an editor has just typed:

- ``mid``: inside a sentence, after a word and its space (at least 3 words in, 3 to go);
- ``sentence``: after a sentence's full stop and space, with the paragraph going on;
- ``paragraph``: at the start of a new paragraph (after the blank line).

The truth is what the author wrote next. Documents, not cuts, are split between ``dev`` and
``heldout`` by a hash of their name with a fixed seed, so no held-out text was ever seen
while tuning. Everything is deterministic for a given set of installed files.
"""

from __future__ import annotations

import gzip
import hashlib
import random
import re
from dataclasses import dataclass
from pathlib import Path

KINDS = ("mid", "sentence", "paragraph")
SEED = "tether-quality-1"
TRUTH_CHARS = 120
MIN_BEFORE = 300  # characters of the document before a cut: enough context to continue
_PROSE_WORD = re.compile(r"[A-Za-z][a-z']+")
_SENTENCE_END = re.compile(r"(?<=[a-z0-9\)][.!?]) (?=[A-Z])")


@dataclass(frozen=True, slots=True)
class Case:
    ident: str  # document name and cut position, stable across runs
    document: str
    split: str
    kind: str
    text: str  # the document up to the cursor (what the editor holds before it)
    truth: str  # what the author wrote next


def collect_documents(roots: list[Path] | None = None) -> dict[str, str]:
    """Name -> text of every usable document, in name order."""
    found: dict[str, str] = {}
    site = roots or _default_roots()
    for root in site:
        if root.name.endswith("site-packages"):
            for meta in sorted(root.glob("*.dist-info/METADATA")):
                body = _metadata_body(meta)
                if body:
                    found[f"pypi:{meta.parent.name.split('-')[0].lower()}"] = body
        else:
            for path in sorted(root.glob("*/*")):
                if _is_doc_file(path):
                    text = _read_doc(path)
                    if text:
                        found[f"deb:{path.parent.name}/{path.name}"] = text
    return dict(sorted(found.items()))


def _default_roots() -> list[Path]:
    import sysconfig

    roots = [Path(sysconfig.get_paths()["purelib"])]
    if Path("/usr/share/doc").is_dir():
        roots.append(Path("/usr/share/doc"))
    return roots


def _metadata_body(path: Path) -> str:
    try:
        raw = path.read_text("utf-8", errors="replace")
    except OSError:
        return ""
    _, sep, body = raw.partition("\n\n")
    return body if sep else ""


def _is_doc_file(path: Path) -> bool:
    name = path.name.lower()
    stem = name.removesuffix(".gz")
    return (
        path.is_file()
        and (stem.startswith("readme") or stem in ("news", "news.txt", "history", "faq", "about"))
        and not stem.startswith("readme.debian")
    )


def _read_doc(path: Path) -> str:
    try:
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
        return data[:200_000].decode("utf-8", errors="replace")
    except (OSError, EOFError, gzip.BadGzipFile):
        return ""


def normalize_document(text: str) -> str:
    """Paragraphs separated by one blank line, each reflowed to one line (as an editor holds
    prose); markup-only paragraphs kept out, so contexts read like documents."""
    text = text.replace("\r\n", "\n")
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in block.strip().splitlines()]
        if not lines:
            continue
        if _is_heading(lines):
            paragraphs.append(lines[0].lstrip("#").strip())
        elif is_prose(block):
            paragraphs.append(" ".join(lines))
    return "\n\n".join(p for p in paragraphs if p)


def _is_heading(lines: list[str]) -> bool:
    if len(lines) == 1 and lines[0].startswith("#") and len(lines[0]) < 80:
        return bool(_PROSE_WORD.search(lines[0]))
    # reST: a title line underlined with = - ~ ...
    return len(lines) == 2 and len(set(lines[1])) == 1 and lines[1][:1] in "=-~^*#"


def is_prose(block: str) -> bool:
    """A paragraph of sentences: mostly words, no code or markup."""
    stripped = block.strip()
    if len(stripped) < 80 or stripped[:1] in "<|!-*+>[`{.:#$" or "```" in stripped:
        return False
    if any(line.startswith(("    ", "\t", ">>>", "$ ", "- ", "* ")) for line in block.splitlines()):
        return False
    if re.search(r"https?://|\]\(|::|`|\{|\}|==|=>|\|", stripped):
        return False
    words = stripped.split()
    prose = sum(1 for w in words if _PROSE_WORD.fullmatch(w.strip(".,;:!?()\"'")))
    return len(words) >= 12 and prose >= 0.8 * len(words) and stripped[-1] in ".!?:"


def split_of(name: str) -> str:
    digest = hashlib.sha256(f"{SEED}:{name}".encode()).digest()
    return "heldout" if digest[0] % 3 == 0 else "dev"  # a third held out


def make_cases(documents: dict[str, str], per_document: int = 3) -> list[Case]:
    """Up to ``per_document`` cuts per document (one of each kind while the document has
    them), chosen by a generator seeded with the document's name."""
    cases: list[Case] = []
    seen: set[str] = set()
    for name, raw in documents.items():
        text = normalize_document(raw)
        if len(text) < MIN_BEFORE + 100 or text in seen:
            continue
        seen.add(text)  # the same README shipped twice (a package and its Debian doc)
        rng = random.Random(f"{SEED}:{name}")
        spots = _spots(text)
        kinds = list(KINDS)
        rng.shuffle(kinds)
        made = 0
        for kind in kinds:
            options = [at for at in spots[kind] if at >= MIN_BEFORE and len(text) - at >= 40]
            if not options or made >= per_document:
                continue
            at = rng.choice(options)
            truth = text[at : at + TRUTH_CHARS].split("\n\n")[0]  # to its paragraph's end
            cases.append(Case(f"{name}@{at}", name, split_of(name), kind, text[:at], truth))
            made += 1
    return cases


def _spots(text: str) -> dict[str, list[int]]:
    """Cursor positions of each kind in the document's prose paragraphs."""
    spots: dict[str, list[int]] = {kind: [] for kind in KINDS}
    start = 0
    for paragraph in text.split("\n\n"):
        if is_prose(paragraph):
            if start > 0:
                spots["paragraph"].append(start)
            for match in _SENTENCE_END.finditer(paragraph):
                spots["sentence"].append(start + match.end())
            for sentence in re.split(r"(?<=[.!?]) ", paragraph):
                offset = paragraph.find(sentence)
                words = [m.end() for m in re.finditer(r"\S+ ", sentence)]
                for end in words[3:-3]:
                    spots["mid"].append(start + offset + end)
        start += len(paragraph) + 2
    return spots


def load_cases(per_document: int = 3) -> list[Case]:
    return make_cases(collect_documents(), per_document)
