"""Builds the model prompt from the server-held document: no document text travels in requests.

Order, chosen so consecutive requests from one editor share the longest token prefix (the local
provider then evaluates only the new tokens): the fixed prefix (system text, instruction;
tokenized once at start), the document's opening region when it is not already in the window,
then whole regions before the cursor, starting at a region boundary that stays put while the
editor types on, and finally the text up to the cursor, which the model continues.
Knows nothing of sockets or providers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .regions import RegionIndex

PROMPT_VERSION = "1"

SYSTEM_COMPLETE = (
    "You are a writing assistant inside a collaborative editor. Continue the document exactly"
    " where it stops, in the same language and voice. Write at most one sentence."
)
SYSTEM_REWRITE = (
    "You are a writing assistant inside a collaborative editor. Rewrite the given passage so it"
    " reads clearly. Keep its meaning and language. Reply with the rewritten passage only."
)
STOP_COMPLETE = ("<|im_end|>", "\n\n")
STOP_REWRITE = ("<|im_end|>",)


def _chat(system: str, user: str) -> str:
    return (
        f"<|im_start|>system\n{system}<|im_end|>\n"
        f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )


COMPLETE_PREFIX = _chat(SYSTEM_COMPLETE, "Continue my document.")


@dataclass(frozen=True, slots=True)
class BuiltPrompt:
    text: str
    kind: str
    # The text right before the cursor that the prompt ends with: the cache's agreement key.
    window: str
    stop: tuple[str, ...]
    context_tokens: int


class ContextBuilder:
    def __init__(self, count_tokens: Callable[[str], int], *, budget_tokens: int = 700) -> None:
        self.count_tokens = count_tokens
        self.budget_tokens = budget_tokens
        self.prefix_tokens = count_tokens(COMPLETE_PREFIX)  # the fixed part, counted once

    def complete(self, regions: RegionIndex, text: str, cursor: int) -> BuiltPrompt:
        parts = regions.refresh(text)
        if not parts:
            return BuiltPrompt(COMPLETE_PREFIX, "complete", "", STOP_COMPLETE, self.prefix_tokens)
        here = regions.region_at(max(cursor - 1, 0))
        # Whole regions back from the cursor's, within budget: the start moves only when the
        # budget forces it, so typing at the end keeps the prompt's prefix unchanged.
        used = 0
        first = here
        while first > 0 and used + parts[first - 1].tokens <= self.budget_tokens:
            first -= 1
            used += parts[first].tokens
        body = text[parts[first].start : cursor]
        head = ""
        if first > 0:
            head = parts[0].text.rstrip("\n") + "\n\n[…]\n\n"
        prompt = COMPLETE_PREFIX + head + body
        tokens = self.prefix_tokens + used + parts[here].tokens + (parts[0].tokens if head else 0)
        return BuiltPrompt(
            prompt, "complete", text[max(0, cursor - 200) : cursor], STOP_COMPLETE, tokens
        )

    def rewrite(self, text: str, start: int, end: int) -> BuiltPrompt:
        passage = text[start:end]
        prompt = _chat(SYSTEM_REWRITE, passage)
        return BuiltPrompt(prompt, "rewrite", passage, STOP_REWRITE, self.count_tokens(prompt))
