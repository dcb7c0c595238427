"""A rich tree as Markdown (CommonMark with GitHub's strikethrough).

Headings ``#``, emphasis, inline code, links, bullet and ordered lists with nesting, blockquotes,
fenced code blocks, rules, images and hard breaks (``\\`` at the end of a line). A node this does
not know keeps its text: as a block if it holds blocks, inline if it holds text. Marks are opened
and closed only where they change, with spaces kept outside them (``**bold **`` is not bold in
CommonMark).

Reads back to the same tree (``markdown_in``), tested as a property: text that Markdown would
read as syntax is escaped (``\\*``, ``1986\\.`` at a line's start, a heading's trailing ``\\#``,
``\\&copy;``), whitespace a paragraph or line would lose at its edges is written as a character
reference (``&#32;``), a mark whose delimiter CommonMark would not see as one (``**a.**b``) gets
its neighbouring character as a reference, adjacent lists of one kind alternate their markers
(``-``/``*``, ``.``/``)``) so they stay two lists, and a list item's blocks are written tight
only where the next one cannot be read into the paragraph before it. What Markdown cannot hold
is documented in docs/rich-text.md (an empty paragraph, a hard break ending a block).

Safe through any CommonMark renderer: nothing a document holds can end a construct early and
have what follows read as Markdown or raw HTML. A line break inside text is written as
``&#10;``, an address as a destination that percent-encodes controls, whitespace, ``<>`` and
backticks (``collab.content.urls``), and links and images only to the addresses the HTML export
keeps (http(s), mailto, relative): another link keeps its text, an image its alt text.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from markdown_it.common.utils import isMdAsciiPunct, isPunctChar, isWhiteSpace

from .attrs import MAX_START, alt_text, code_language, heading_level, list_start, task_checked
from .tree import Node, Run, inline_runs
from .urls import destination

_ESCAPED = re.compile(r"([\\`*_\[\]<>~|])")
_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")  # &copy; is read as ©: the & written \&
_BREAKS = {"\n": "&#10;", "\r": "&#13;"}
_BREAK = re.compile(r"[\n\r]")
# At a line's start: an ATX heading, a list item, a rule or setext underline, an ordered item.
_LINE_START = re.compile(r"[#+=-]|\d+(?=[.)])")
_CLOSING_HASHES = re.compile(r"(?:^|(?<=[ \t]))#+$")  # an ATX heading's closing sequence
_BARE_MARKER = re.compile(r"[-*]|\d+[.)]")  # a list item's first line with nothing after it
_RULE = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*")  # a thematic break line
_ORDER = ("link", "bold", "italic", "strike")  # outermost first; code is always innermost
_WRAP = {"bold": "**", "italic": "*", "strike": "~~"}
INLINE_TAGS = frozenset({"hardBreak", "image", "mention", "emoji"})
TEXTBLOCKS = frozenset({"paragraph", "heading", "codeBlock"})
LISTS = frozenset({"bulletList", "orderedList", "taskList"})
# A block that may follow a paragraph on the next line of a list item and not be read into it.
_INTERRUPTS = frozenset({"bulletList", "taskList", "blockquote", "codeBlock", "heading"})


def to_markdown(blocks: tuple[Node | Run, ...]) -> str:
    text = _blocks(blocks)
    return text + "\n" if text else ""


def _blocks(blocks: tuple[Node | Run, ...] | list[Node | Run], tight: bool = False) -> str:
    """Blocks, a blank line between them (or, ``tight``, a line break where that reads the
    same); a list right after a list of its kind takes the other marker, so it stays apart."""
    out: list[str] = []
    before: Node | Run | None = None
    other = False  # this container's last list used the other marker
    for block in blocks:
        kind = _list_kind(block)
        if isinstance(block, Node) and kind is not None:
            other = kind == _list_kind(before) and not other
            part = _list(block, other)
        else:
            part = _block(block)
        if not part:
            continue
        if out:
            out.append("\n" if tight and _tight_after(before, block, part) else "\n\n")
        out.append(part)
        before = block
    return "".join(out)


def _list_kind(block: Node | Run | None) -> str | None:
    if not isinstance(block, Node) or block.tag not in LISTS:
        return None
    return "ordered" if block.tag == "orderedList" else "bullet"


def _tight_after(before: Node | Run | None, block: Node | Run, part: str) -> bool:
    if not isinstance(before, Node) or before.tag not in ("paragraph", "heading"):
        return False
    if not isinstance(block, Node):
        return False
    if block.tag in LISTS and _BARE_MARKER.fullmatch(part.split("\n")[0]):
        return False  # an item beginning blank cannot interrupt a paragraph ("-" underlines)
    if block.tag == "orderedList":
        return list_start(block.attrs.get("start")) == 1  # another number reads as the text's
    if block.tag == "heading":
        return part.startswith("#")  # a setext heading would take the paragraph in
    return block.tag in _INTERRUPTS


def _block(node: Node | Run) -> str:
    if isinstance(node, Run) or node.tag == "#text":
        return _inline([node])
    tag = node.tag
    if tag == "heading":
        return _heading(node)
    if tag == "paragraph":
        return _inline(node.children)
    if tag == "codeBlock":
        return _code_block(node)
    if tag == "blockquote":
        inner = _blocks(node.children)
        return "\n".join(">" if not line else "> " + line for line in inner.split("\n"))
    if tag in LISTS:
        return _list(node, False)
    if tag == "horizontalRule":
        return "---"
    if tag in INLINE_TAGS:
        return _inline([node])
    if _holds_text(node):
        return _inline(node.children)
    return _blocks(node.children)  # unknown, holding blocks: they keep their text


def _heading(node: Node) -> str:
    """ATX (``## text``), or setext (text, then ``===``/``---``) for a level 1 or 2 heading
    holding a hard break: an ATX heading is one line. Deeper, a hard break is a line break."""
    level = heading_level(node.attrs.get("level"))
    children = node.children
    breaks = any(isinstance(c, Node) and c.tag == "hardBreak" for c in inline_runs(children))
    if breaks and level <= 2:
        text = _inline(children)
        if "\n" in text:
            return text + "\n" + ("===" if level == 1 else "---")
    elif breaks:
        children = tuple(
            Run("\n") if isinstance(c, Node) and c.tag == "hardBreak" else c
            for c in inline_runs(children)
        )
    text = _inline(children)
    if _CLOSING_HASHES.search(text):  # "Version 2 #": the # would be read as the closing
        hashes = len(text) - len(text.rstrip("#"))
        text = text[:-hashes] + "\\" + text[-hashes:]
    return "#" * level + (" " + text if text else "")


def _list(node: Node, other: bool) -> str:
    """The list's items; ``other``: with ``*`` or ``)`` in place of ``-`` or ``.``. An item
    whose first line would be read as a rule (``- - -``: lists nested in empty items) begins
    its body on the next line."""
    ordered = node.tag == "orderedList"
    number = list_start(node.attrs.get("start")) if ordered else 0
    items = []
    for child in node.children:
        if isinstance(child, Run):
            continue
        if ordered:
            marker = f"{number}{')' if other else '.'} "
            number = min(number + 1, MAX_START)
        elif node.tag == "taskList" or child.tag == "taskItem":
            box = "[x]" if task_checked(child.attrs.get("checked")) else "[ ]"
            marker = f"{'*' if other else '-'} {box} "
        else:
            marker = "* " if other else "- "
        body = _item_body(child.children)
        pad = " " * len(marker)
        lines = body.split("\n") if body else [""]
        if _RULE.fullmatch(marker + lines[0]):
            lines.insert(0, "")
        rest = "".join("\n" + (pad + line if line else "") for line in lines[1:])
        items.append((marker + lines[0]).rstrip(" ") + rest)
    return "\n".join(items)


def _item_body(blocks: tuple[Node | Run, ...]) -> str:
    """A list item's blocks, tight where that reads the same; a rule first is ``___`` (``- ---``
    and ``* ***`` are rules themselves, not items holding one)."""
    first = next((b for b in blocks if not isinstance(b, Run) or b.text), None)
    if isinstance(first, Node) and first.tag == "horizontalRule":
        rest = _blocks(blocks[blocks.index(first) + 1 :], tight=True)
        return "___" + ("\n\n" + rest if rest else "")
    return _blocks(blocks, tight=True)


def _code_block(node: Node) -> str:
    """A fence longer than any run of its character in the text; ``~~~`` if the language
    holds a backtick (a backtick fence's info string cannot)."""
    text = "".join(run.text for run in inline_runs(node.children) if isinstance(run, Run))
    language = code_language(node.attrs.get("language"))
    info = ""
    if language is not None:
        info = _ENTITY.sub(r"\\&", language.replace("\\", "\\\\"))  # read with escapes
    char = "~" if "`" in info else "`"
    longest = max((len(m) for m in re.findall(re.escape(char) + "+", text)), default=0)
    fence = char * max(3, longest + 1)
    apart = " " if info.startswith(char) else ""  # else the fence would take it in
    return f"{fence}{apart}{info}\n{text}\n{fence}"


def _holds_text(node: Node) -> bool:
    return any(
        isinstance(child, Run) or child.tag == "#text" or child.tag in INLINE_TAGS
        for child in node.children
    )


@dataclass(slots=True)
class _Piece:
    """Written Markdown: text, or an emphasis delimiter (``mark``) and where its pair is."""

    text: str
    mark: str = ""
    opens: bool = False
    pair: int = -1


_Mark = tuple[str, Any]  # a mark's name and attributes as written (a link: its destination)


@dataclass(slots=True)
class _Segment:
    """What ``_inline`` writes: text with the marks it is written under (``space``: whitespace,
    which takes only the marks of the words on both sides), or an inline node."""

    text: str
    marks: list[_Mark]
    space: bool = False
    node: Node | None = None
    code: bool = False


def _inline(children: tuple[Node | Run, ...] | list[Node | Run]) -> str:
    runs = inline_runs(tuple(children))
    if all(isinstance(run, Run) and not run.marks for run in runs):  # plain text: no marks
        return _lines(_text("".join(run.text for run in runs if isinstance(run, Run))))
    pieces: list[_Piece] = []
    open_marks: list[tuple[str, Any, int]] = []  # name, attributes, opener's piece

    def add(text: str) -> None:
        if text:
            pieces.append(_Piece(text))

    def close(keep: int) -> None:
        while len(open_marks) > keep:
            name, attrs, at = open_marks.pop()
            if name == "link":
                add("](" + str(attrs["href"]) + ")")  # a destination already (_mark_attrs)
            else:
                pieces.append(_Piece(_WRAP[name], name, False, at))
                pieces[at].pair = len(pieces) - 1

    segments = _segments(children)
    lasting = _lasting(segments)
    going_on: _Segment | None = None  # the next segment that is not a hard break
    after_break: list[_Segment | None] = [None] * len(segments)
    for index in range(len(segments) - 1, -1, -1):
        after_break[index] = going_on
        if not _is_break(segments[index]):
            going_on = segments[index]
    for index, segment in enumerate(segments):
        if _is_break(segment):
            # Marks go on over a hard break, but one that ends there closes before it: a
            # delimiter at the start of the next line could only open.
            going_on = after_break[index]
            wanted = going_on.marks if going_on is not None and going_on.node is None else []
            keep = 0
            while keep < len(open_marks) and open_marks[keep][:2] in wanted:
                keep += 1
            close(keep)
            add("\\\n")
            continue
        if segment.node is not None:
            close(0)
            add(_inline_node(segment.node))
            continue
        # Marks already open stay open, in the order they were opened (so *a **b** c* stays
        # nested), up to the first one this text does not have; the marks that last longest
        # open first, outside the others, so a mark that goes on after another ends need not
        # be closed and opened again around it.
        wanted = sorted(segment.marks, key=lambda mark: -lasting[index].get(mark[0], 0))
        keep = 0
        while keep < len(open_marks) and open_marks[keep][:2] in wanted:
            keep += 1
        close(keep)
        for name, attrs in wanted:
            if not any(mark[:2] == (name, attrs) for mark in open_marks):
                if name == "link":
                    add("[")
                else:
                    pieces.append(_Piece(_WRAP[name], name, True))
                open_marks.append((name, attrs, len(pieces) - 1))
        if segment.space:
            text = _breaks(segment.text)
            if pieces and pieces[-1].opens and not text.startswith("&"):
                text = f"&#x{ord(text[0]):X};" + text[1:]  # a delimiter cannot be before one
            add(text)
        else:
            add(_code(segment.text) if segment.code else _text(segment.text))
    close(0)
    for left, right in pairwise(pieces):
        if left.text.endswith("!") and right.text.startswith("["):
            left.text = left.text[:-1] + "\\!"  # "![" before a link would make it an image
    _apart(pieces)
    _flanking(pieces)
    return _lines("".join(piece.text for piece in pieces))


def _segments(children: tuple[Node | Run, ...] | list[Node | Run]) -> list[_Segment]:
    """The runs cut into words and the whitespace around them (code kept whole), trailing
    hard breaks left out (a block cannot end in one: its ``\\`` would be read as text), and
    each whitespace given the marks both words around it have: a delimiter cannot stand
    next to a space, so whitespace at a mark's edge is written outside it."""
    runs = inline_runs(tuple(children))
    while runs and isinstance(runs[-1], Node) and runs[-1].tag == "hardBreak":
        runs.pop()
    out: list[_Segment] = []
    for run in runs:
        if isinstance(run, Node):
            out.append(_Segment("", [], node=run))
            continue
        marks = [(name, _mark_attrs(name, run.marks.get(name))) for name in _ORDER]
        written = [(name, attrs) for name, attrs in marks if attrs is not None]
        if "code" in run.marks:  # a code span keeps its spaces inside
            out.append(_Segment(run.text, written, code=True))
            continue
        core = run.text.strip()
        lead = run.text[: len(run.text) - len(run.text.lstrip())]
        trail = run.text[len(run.text.rstrip()) :] if core else ""
        for text, space in ((lead, True), (core, False), (trail, True)):
            if text:
                out.append(_Segment(text, written, space))
    before_of, after_of = _words_around(out)
    for at, segment in enumerate(out):
        if not segment.space:
            continue
        before, after = before_of[at], after_of[at]
        if before is None or after is None:
            segment.marks = [mark for mark in segment.marks if mark[0] == "link"]
            continue
        around = (out[before], out[after])
        segment.marks = [
            mark
            for mark in segment.marks
            if mark[0] == "link"  # a link's text may begin and end with spaces: "[ a ](x)"
            or all(word.node is None and mark in word.marks for word in around)
        ]
    return out


def _words_around(segments: list[_Segment]) -> tuple[list[int | None], list[int | None]]:
    """For each segment, the nearest word (text or inline node, not whitespace or a hard
    break) before it and after it."""
    before: list[int | None] = []
    last: int | None = None
    for at, segment in enumerate(segments):
        before.append(last)
        if not segment.space and not _is_break(segment):
            last = at
    after: list[int | None] = [None] * len(segments)
    last = None
    for at in range(len(segments) - 1, -1, -1):
        after[at] = last
        if not segments[at].space and not _is_break(segments[at]):
            last = at
    return before, after


def _lasting(segments: list[_Segment]) -> list[dict[str, int]]:
    """For each segment, how many segments from it on keep each of its marks (with the same
    attributes), over hard breaks, up to another inline node (marks are closed around it)."""
    out: list[dict[str, int]] = [{} for _ in segments]
    after: _Segment | None = None  # the next segment that is not a hard break
    after_at = -1
    for index in range(len(segments) - 1, -1, -1):
        segment = segments[index]
        if _is_break(segment):
            continue
        if segment.node is None:
            for name, attrs in segment.marks:
                same = after is not None and after.node is None and (name, attrs) in after.marks
                out[index][name] = 1 + (out[after_at].get(name, 0) if same else 0)
        after, after_at = segment, index
    return out


def _is_break(segment: _Segment) -> bool:
    return segment.node is not None and segment.node.tag == "hardBreak"


def _apart(pieces: list[_Piece]) -> None:
    """Italic is ``*``, but ``_`` where a ``*`` would be read with bold's: next to a bold
    delimiter (``**a***b*`` is one run of three), or where it or a bold inside or around it is
    inside a word on both sides (``**a*b*c**``: such a delimiter may close as well as open,
    and CommonMark pairs it with the other mark's)."""
    for left, right in pairwise(pieces):
        if left.mark and right.mark and not left.opens and right.opens:
            if left.text[-1] == right.text[0] == "*":
                italic = left if left.mark == "italic" else right
                if italic.mark == "italic":
                    italic.text = pieces[italic.pair].text = "_"
    # Italic spans never overlap, nor do bold ones: each bold is inside at most one italic
    # and around at most one, so this is linear.
    bolds = [at for at, p in enumerate(pieces) if p.mark == "bold" and p.opens]
    for at, piece in enumerate(pieces):
        if piece.mark == "italic" and piece.opens and piece.text == "*":
            near = [at, piece.pair]
            first = bisect_right(bolds, at)
            inside = first
            while inside < len(bolds) and bolds[inside] < piece.pair:  # bold inside it
                near += [bolds[inside], pieces[bolds[inside]].pair]
                inside += 1
            if first and pieces[bolds[first - 1]].pair > at:  # bold around it
                near += [bolds[first - 1], pieces[bolds[first - 1]].pair]
            if any(_both_flanking(pieces, i) for i in near):
                piece.text = pieces[piece.pair].text = "_"


def _both_flanking(pieces: list[_Piece], at: int) -> bool:
    before, after = _neighbour(pieces, at, -1), _neighbour(pieces, at, 1)
    left, right = _flanks(before[1] if before else " ", after[1] if after else " ")
    return left and right


def _flanking(pieces: list[_Piece]) -> None:
    """Each delimiter where CommonMark reads it as one: an opener must be left-flanking and
    a closer right-flanking (``_`` also not inside a word). Where the character beside it makes
    it not so, that character (a letter or digit: anything else already is) is written as a
    character reference, which is punctuation to the delimiter and the same text when read.
    That can undo a delimiter beside it (``a**&#x61;_b_**``), so the delimiters beside a
    changed piece are looked at again; each change turns a letter into a reference, so it
    ends, and each looks at two pieces."""
    todo = [at for at, piece in enumerate(pieces) if piece.mark]
    while todo:
        at = todo.pop()
        fixed = _flank(pieces, at)
        if fixed is not None:  # the delimiters beside the changed piece are looked at again
            todo += [i for i in (fixed - 1, fixed + 1) if 0 <= i < len(pieces) and pieces[i].mark]


def _flank(pieces: list[_Piece], at: int) -> int | None:
    """Make the delimiter at ``at`` read as one if it does not; the piece changed, if any."""
    piece = pieces[at]
    before, after = _neighbour(pieces, at, -1), _neighbour(pieces, at, 1)
    last = before[1] if before else " "
    following = after[1] if after else " "
    left, right = _flanks(last, following)
    if piece.text[0] == "_":
        ok = (
            (left and (not right or _punct(last)))
            if piece.opens
            else right and (not left or _punct(following))
        )
    else:
        ok = left if piece.opens else right
    if ok:
        return None
    side = before if piece.opens else after
    if side is None or _punct(side[1]) or isWhiteSpace(ord(side[1])):
        return None
    _as_reference(pieces, side[0], at_end=piece.opens)
    return side[0]


def _neighbour(pieces: list[_Piece], at: int, step: int) -> tuple[int, str] | None:
    """The nearest non-empty piece before (``step`` -1) or after ``at``, and its character
    next to it."""
    at += step
    while 0 <= at < len(pieces):
        if pieces[at].text:
            return at, pieces[at].text[-1 if step < 0 else 0]
        at += step
    return None


def _flanks(last: str, following: str) -> tuple[bool, bool]:
    """(left-flanking, right-flanking) of a delimiter run between ``last`` and ``following``,
    as markdown-it's scanDelims decides."""
    last_space, next_space = isWhiteSpace(ord(last)), isWhiteSpace(ord(following))
    last_punct, next_punct = _punct(last), _punct(following)
    left = not next_space and (not next_punct or last_space or last_punct)
    right = not last_space and (not last_punct or next_space or next_punct)
    return left, right


def _punct(char: str) -> bool:
    return isMdAsciiPunct(ord(char)) or isPunctChar(char)


def _as_reference(pieces: list[_Piece], at: int, at_end: bool) -> None:
    text = pieces[at].text
    if at_end:
        pieces[at].text = text[:-1] + f"&#x{ord(text[-1]):X};"
    else:
        pieces[at].text = f"&#x{ord(text[0]):X};" + text[1:]


def _lines(text: str) -> str:
    """Each line (a hard break begins one) as Markdown reads it back: whitespace at its edges,
    which a paragraph's lines lose, written as a character reference, and a start that would
    make it a heading, a list item, a rule or a setext underline escaped."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line and line[0].isspace():
            line = f"&#x{ord(line[0]):X};" + line[1:]
        elif start := _LINE_START.match(line):
            end = start.end()
            line = (
                "\\" + line
                if end == 1 and not line[0].isdigit()
                else (line[:end] + "\\" + line[end:])
            )
        if i == len(lines) - 1 and line and line[-1].isspace():
            line = line[:-1] + f"&#x{ord(line[-1]):X};"
        lines[i] = line
    return "\n".join(lines)


def _mark_attrs(name: str, attrs: Any) -> Mapping[str, Any] | None:
    """The mark as written, or None: absent, or a link to an address not kept."""
    if attrs is None:
        return None
    if name != "link":
        return attrs if isinstance(attrs, Mapping) else {}
    href = destination(attrs.get("href")) if isinstance(attrs, Mapping) else None
    return None if href is None else {"href": href}


def _text(text: str) -> str:
    return _breaks(_ENTITY.sub(r"\\&", _ESCAPED.sub(r"\\\1", text)))


def _breaks(text: str) -> str:
    """Line breaks inside text as character references: written as they are, they would end
    the paragraph, or begin a line Markdown reads as a heading, a list or raw HTML."""
    return _BREAK.sub(lambda match: _BREAKS[match.group()], text)


def _code(text: str) -> str:
    """Inline code; a line break in it is written between two code spans (a code span cannot
    hold one: a blank line would end it and its paragraph). A space is added inside each end
    where CommonMark takes one away (text beginning or ending with a backtick, or with a space
    at both ends)."""
    if _BREAK.search(text):
        pieces = re.split(r"([\n\r])", text)
        return "".join(_BREAKS[p] if p in _BREAKS else _code(p) if p else "" for p in pieces)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    spaced = text.startswith(" ") and text.endswith(" ") and text.strip(" ")
    pad = " " if text.startswith("`") or text.endswith("`") or spaced else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _inline_node(node: Node) -> str:
    if node.tag == "hardBreak":
        return "\\\n"
    if node.tag == "image":
        alt = _text(alt_text(node.attrs.get("alt")))
        src = destination(node.attrs.get("src"))
        return alt if src is None else f"![{alt}]({src})"  # not kept: its alt text
    return _inline(node.children)  # a mention or any other inline node: its text
