"""``tether bench rich-ai``: time to first token on a rich document (a Tiptap tree) against the
same text as plain ``content``, side by side in one run on one server, and the cost of reading
the document for the AI after one edit.

Each document is about ``--megabytes`` of prose in paragraphs (a heading every 20), built the
way y-prosemirror writes it. Per kind: the first request on each document (cold: its context is
read and evaluated for the first time) and ``--rounds`` requests after typing a word at the end
(warm), the kinds alternating, first tokens timed at the client. The model is the embedded one;
caches and prefetch are off so every request reaches it, and it writes at least a token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pycrdt import Doc, Text, XmlElement, XmlFragment, XmlText

from tether.ai.suggest.document_text import DocumentText
from tether.client import DocumentHandle, TetherClient
from tether.collab.updates.guard import UpdateGuard
from tether.protocol.updates.update_scan import scan_update

from .ai_requests import Sample, _collect, _socket_messages
from .launcher import ServerProcess

_SUBJECTS = ("harbour", "market", "captain", "storm", "lighthouse", "ferry", "garden", "mill")
_VERBS = ("watched", "repaired", "described", "remembered", "crossed", "painted", "counted")
_OBJECTS = ("the old pier", "a broken net", "the evening tide", "the long road", "a letter")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--megabytes", type=float, default=1.0, help="size of each document")
    parser.add_argument("--docs", type=int, default=2, help="documents per kind (cold samples)")
    parser.add_argument("--rounds", type=int, default=12, help="warm requests per kind")
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--json", dest="json_out", type=Path, default=None)


def run(args: argparse.Namespace) -> int:
    result = asyncio.run(_run(args))
    print(json.dumps(result, indent=2))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


def paragraphs(megabytes: float, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < megabytes * 1_000_000:
        sentences = [
            f"The {rng.choice(_SUBJECTS)} keeper {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}"
            f" on day {rng.randrange(1, 10_000)}."
            for _ in range(rng.randrange(2, 6))
        ]
        out.append(" ".join(sentences))
        size += len(out[-1]) + 2
    return out


def write_rich(doc: Doc, blocks: list[str]) -> XmlText:
    """The blocks as y-prosemirror writes paragraphs and headings; the last block's text."""
    fragment = doc.get("default", type=XmlFragment)
    last: XmlText | None = None
    with doc.transaction():
        for index, block in enumerate(blocks):
            if index % 20 == 0:
                element = fragment.children.append(XmlElement("heading", {"level": 2}))
                element.children.append(XmlText()).insert(0, f"Part {index // 20 + 1}")
            element = fragment.children.append(XmlElement("paragraph"))
            last = element.children.append(XmlText())
            last.insert(0, block)
    assert last is not None
    return last


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    blocks = paragraphs(args.megabytes)
    settings = {
        "ai_provider": "local",
        "ai_stop": "tokens",
        "ai_heal": "off",
        "ai_junk_filter": "off",
        "ai_cache_entries": 0,
        "ai_prefetch_ms": 0,
        "ai_max_tokens": args.max_tokens,
    }
    samples: dict[str, dict[str, list[Sample]]] = {
        kind: {"cold": [], "warm": []} for kind in ("rich", "plain")
    }
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp), **settings) as server:
        async with TetherClient(server.ws_url, token=server.token()) as client:
            opened: dict[str, list[tuple[DocumentHandle, Any]]] = {"rich": [], "plain": []}
            for number in range(args.docs):
                for kind in ("rich", "plain"):
                    doc = await client.open(f"bench-{kind}-{number}")
                    end = _seed(doc, kind, blocks)
                    await doc.wait_acked(timeout=120)
                    opened[kind].append((doc, end))
            for number in range(args.docs):
                for kind in ("rich", "plain") if number % 2 == 0 else ("plain", "rich"):
                    doc, end = opened[kind][number]
                    _type(doc, kind, end, " and")  # mid-sentence: the model writes something
                    await doc.wait_acked(timeout=30)
                    samples[kind]["cold"].append(await _ask(doc, kind, end, args.max_tokens))
            for round_no in range(args.rounds):
                order = ("rich", "plain") if round_no % 2 == 0 else ("plain", "rich")
                for kind in order:
                    doc, end = opened[kind][0]
                    _type(doc, kind, end, f" next{round_no}")
                    await doc.wait_acked(timeout=30)
                    samples[kind]["warm"].append(await _ask(doc, kind, end, args.max_tokens))
    result: dict[str, Any] = {
        "server_ttft_median_ms": {
            f"{phase}_{kind}": _median_ms([s.server_ttft for s in samples[kind][phase]])
            for phase in ("cold", "warm")
            for kind in ("rich", "plain")
        },
        "megabytes": args.megabytes,
        "blocks": len(blocks),
        "read_after_one_edit_ms": _read_cost(blocks),
    }
    for phase in ("cold", "warm"):
        medians = {}
        for kind in ("rich", "plain"):
            ttfts = [s.ttft for s in samples[kind][phase] if s.ttft is not None]
            errors = [s.error or s.reason for s in samples[kind][phase] if s.ttft is None]
            medians[kind] = statistics.median(ttfts) * 1000 if ttfts else None
            result[f"{phase}_{kind}_ms"] = [round(t * 1000, 1) for t in ttfts]
            if errors:
                result[f"{phase}_{kind}_errors"] = errors
        result[f"{phase}_median_ms"] = {k: round(v, 1) if v else None for k, v in medians.items()}
        if medians["rich"] and medians["plain"]:
            result[f"{phase}_ratio_rich_to_plain"] = round(medians["rich"] / medians["plain"], 2)
    return result


def _median_ms(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return round(statistics.median(known) * 1000, 1) if known else None


def _seed(doc: DocumentHandle, kind: str, blocks: list[str]) -> Any:
    if kind == "rich":
        return write_rich(doc.doc, blocks)
    doc.text.insert(0, "\n\n".join(blocks))
    return doc.text


def _type(doc: DocumentHandle, kind: str, end: Any, word: str) -> None:
    end.insert(len(end), word)  # pycrdt counts UTF-8 bytes; the text's length in them


async def _ask(doc: DocumentHandle, kind: str, end: Any, max_tokens: int) -> Sample:
    request_id = f"rich-bench-{time.perf_counter_ns()}"
    text = str(end) if kind == "plain" else "".join(t for t, _ in end.diff())
    body: dict[str, Any] = {
        "type": "suggest",
        "id": request_id,
        "kind": "complete",
        "pos": len(text.encode("utf-16-le")) // 2,
        "max_tokens": max_tokens,
    }
    if kind == "rich":
        body["path"] = [len(doc.doc.get("default", type=XmlFragment).children) - 1, 0]
    started = time.perf_counter()
    doc.send_stateless(json.dumps(body))
    return await _collect(_socket_messages(doc, request_id), started)


def _read_cost(blocks: list[str]) -> dict[str, float]:
    """Milliseconds to read the document for the AI after one keystroke at its end (median of
    50), as the engine does: the update followed through the guard's parents, then the window
    around the end read (the rich tree reads again only the block typed in; the plain text is
    one string)."""
    costs: dict[str, float] = {}
    for kind in ("rich", "plain"):
        doc = Doc()
        end: XmlText | Text
        if kind == "rich":
            end = write_rich(doc, blocks)
        else:
            end = doc.get("content", type=Text)
            end.insert(0, "\n\n".join(blocks))
        guard = UpdateGuard(128)
        _admit(guard, doc.get_update())
        updates: list[bytes] = []
        doc.observe(lambda event, updates=updates: updates.append(event.update))
        reader = DocumentText("default")
        first = time.perf_counter()
        reader.around(doc, None)
        costs[f"{kind}_first"] = round((time.perf_counter() - first) * 1000, 2)
        timings = []
        for _ in range(50):
            end.insert(len(end), "x")
            update = updates.pop()
            _admit(guard, update)
            started = time.perf_counter()
            reader.changed(doc, update, guard)
            reader.around(doc, None)
            timings.append(time.perf_counter() - started)
        costs[kind] = round(statistics.median(timings) * 1000, 2)
    return costs


def _admit(guard: UpdateGuard, update: bytes) -> None:
    scan = scan_update(update)
    guard.admit(scan, guard.check(scan))
