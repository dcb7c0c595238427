"""``tether bench rewrites``: how often a rewrite drops what its passage said, and how many such
rewrites the editor is shown unflagged.

Each passage of ``rewrite_corpus`` (48 sentences holding numbers, dates, weekdays, names,
negations and decisions) goes into a document of its own on a real ``tether serve``, and the
whole sentence is asked to be rewritten over the socket exactly as the web editor asks (no
``max_tokens``: the server's default). Per rewrite the bench records the text, the end's reason
and tokens, and the end's ``dropped`` (what the server flagged), and runs this checkout's
detector (``ai.text.faithful``) on the same text, so a checkout that predates the flag (given
with ``--compare``) is judged by the same rule: what it showed unflagged that drops content.

Targets: the embedded model (the server's default provider), and with ``--upstream`` the same
through llama-cpp-python's OpenAI-compatible server on 127.0.0.1 serving ``--upstream-model``.
Writes every rewrite with its losses to ``--json`` (the material for checking the detector by
hand) and prints the counts side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import tempfile
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tether.ai.text.faithful import KINDS, dropped
from tether.client import TetherClient
from tether.protocol.wire.ai_messages import Suggest

from .launcher import REPO, ServerProcess
from .llama_upstream import LlamaServer, missing_modules
from .rewrite_corpus import PASSAGES

ALIAS = "rewrite-upstream"
_SENTENCE_END = re.compile(r"[.!?]\s*$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--compare",
        type=Path,
        default=None,
        help="another checkout (a git worktree of an older commit) run first, as 'before'",
    )
    parser.add_argument(
        "--upstream",
        action="store_true",
        help="also through llama-cpp-python's OpenAI-compatible server (--ai-provider openai)",
    )
    parser.add_argument(
        "--upstream-model",
        choices=("smollm2", "gemma3-270m"),
        default="smollm2",
        help="what the upstream serves: the embedded model's weights (Q4_0), or gemma3-270m"
        " (the quality extra) with llama-cpp-python's gemma chat template",
    )
    parser.add_argument("--max-tokens", type=int, default=None, help="absent: as the web editor")
    parser.add_argument("--limit", type=int, default=len(PASSAGES), help="the first N passages")
    parser.add_argument("--show", type=int, default=12, help="flagged rewrites to print")
    parser.add_argument("--json", dest="json_out", type=Path, default=None)


def run(args: argparse.Namespace) -> int:
    passages = list(PASSAGES[: args.limit])
    checkouts = [("this", REPO)]
    if args.compare is not None:
        checkouts.insert(0, ("before", args.compare.resolve()))
    providers = ["embedded"]
    if args.upstream:
        missing = missing_modules()
        if missing:
            print(f"no upstream: {', '.join(missing)} missing (pip install -e '.[dev]')")
        else:
            providers.append("upstream")
    result: dict[str, Any] = {"passages": len(passages), "runs": []}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        upstream = None
        if "upstream" in providers:
            model, name = _upstream_model(args.upstream_model, Path(tmp))
            template = "gemma" if name.startswith("gemma") else None  # its GGUF carries none
            upstream = stack.enter_context(
                LlamaServer(model, Path(tmp), alias=ALIAS, chat_format=template)
            )
            result["upstream_model"] = name
        for provider in providers:
            for label, checkout in checkouts:
                settings = _provider_settings(provider, upstream)
                workdir = Path(tmp) / f"{provider}-{label}"
                with ServerProcess(workdir, repo=checkout, **settings) as server:
                    rows = asyncio.run(_drive(server, passages, args.max_tokens))
                trial = {
                    "provider": provider,
                    "checkout": label,
                    "commit": _commit(checkout),
                    "summary": summarize(rows),
                    "rewrites": rows,
                }
                result["runs"].append(trial)
                _print_run(trial, args.show)
    _print_table(result["runs"])
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return 0


def _provider_settings(provider: str, upstream: LlamaServer | None) -> dict[str, object]:
    if provider == "embedded":
        return {"ai_provider": "local"}
    assert upstream is not None
    return {
        "ai_provider": "openai",
        "openai_base_url": upstream.url,
        "openai_model": ALIAS,
        "openai_api": "chat",
    }


def _upstream_model(choice: str, scratch: Path) -> tuple[Path, str]:
    from .quality import model_path

    if choice == "gemma3-270m":
        try:
            return model_path("gemma3-270m", scratch), "gemma3-270m"
        except ImportError:
            print("gemma3-270m is not installed (pip install -e '.[quality]'): smollm2 upstream")
    return model_path("smollm2-q4_0", scratch), "smollm2-q4_0"


def _commit(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "?"


async def _drive(
    server: ServerProcess, passages: list[str], max_tokens: int | None
) -> list[dict[str, Any]]:
    """Rewrite each passage, in a document of its own, one at a time."""
    rows: list[dict[str, Any]] = []
    async with TetherClient(server.ws_url, token=server.token()) as client:
        for index, passage in enumerate(passages):
            doc = await client.open(f"rewrite-{index}")
            doc.append(passage)
            await doc.wait_acked()
            request_id = f"r{index}"
            end = len(passage.encode("utf-16-le")) // 2
            request = Suggest(request_id, "rewrite", start=0, end=end, max_tokens=max_tokens)
            doc.send_stateless(request.encode())
            text, last = "", {}
            while True:
                message = json.loads(await asyncio.wait_for(doc.stateless.get(), timeout=180))
                if message.get("id") != request_id:
                    continue
                if message["type"] == "suggestion.delta":
                    text += message["text"]
                elif message["type"] in ("suggestion.end", "suggestion.error"):
                    last = message
                    break
            losses = [[loss.kind, loss.text] for loss in dropped(passage, text)] if text else []
            rows.append(
                {
                    "passage": passage,
                    "rewrite": text,
                    "reason": last.get("reason"),
                    "error": last.get("code"),
                    "tokens": last.get("tokens"),
                    "flagged": last.get("dropped"),
                    "losses": losses,
                    # A passage that ends a sentence, rewritten without an end: cut off.
                    "cut": bool(text)
                    and bool(_SENTENCE_END.search(passage))
                    and not _SENTENCE_END.search(text),
                }
            )
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    shown = [r for r in rows if r["rewrite"]]
    losing = [r for r in shown if r["losses"]]
    flagged = [r for r in shown if r["flagged"]]
    kinds = Counter(kind for r in losing for kind in {k for k, _ in r["losses"]})
    return {
        "rewrites": len(rows),
        "shown": len(shown),
        "junk": sum(1 for r in rows if str(r["reason"]).startswith("junk:")),
        "errors": sum(1 for r in rows if r["error"]),
        "drop_content": len(losing),
        "flagged": len(flagged),
        "shown_unflagged_dropping": sum(1 for r in losing if not r["flagged"]),
        # The server's list is the detector's, rewrite for rewrite.
        "flagged_as_detected": sum(
            1 for r in flagged if r["flagged"] == [{"kind": k, "text": t} for k, t in r["losses"]]
        ),
        "cut": sum(1 for r in shown if r["cut"]),
        "by_kind": {kind: kinds[kind] for kind in KINDS},
    }


def _print_run(run: dict[str, Any], show: int) -> None:
    print(f"\n{run['provider']} / {run['checkout']} ({run['commit']}): flagged rewrites")
    for row in [r for r in run["rewrites"] if r["losses"]][:show]:
        lost = "; ".join(f"{kind} '{text}'" for kind, text in row["losses"])
        print(f"  {row['passage']}\n    → {row['rewrite']!r}\n    dropped: {lost}")


def _print_table(runs: list[dict[str, Any]]) -> None:
    head = ("provider", "checkout", "commit", "shown", "drop", "flagged", "unflagged", "cut")
    print("\n" + " | ".join(head))
    for run in runs:
        s = run["summary"]
        print(
            " | ".join(
                str(v)
                for v in (
                    run["provider"],
                    run["checkout"],
                    run["commit"],
                    f"{s['shown']}/{s['rewrites']}",
                    s["drop_content"],
                    s["flagged"],
                    s["shown_unflagged_dropping"],
                    s["cut"],
                )
            )
        )
        print("    by kind: " + ", ".join(f"{k} {n}" for k, n in s["by_kind"].items()))
