"""What the embedded model may write, and how sure it was: a llama-cpp-python logits processor
run on the model thread before each token is chosen.

- ``must_start``: until the answer holds a character that is not whitespace, tokens that end
  the turn (EOS, ChatML markers, any control token) are banned, and so are tokens holding a line
  break unless the cursor already starts a line. At a sentence end SmolLM2 ends its turn at once
  96% of the time; banned, it writes the next sentence's start (``tether bench quality``).
- Confidence: the probability of the most likely token after the bans, which is the token
  greedy decoding takes (the server's default, temperature 0). With sampling it is an upper
  bound on the chosen token's. The stream hands each piece the lowest confidence among the
  tokens it holds, for the ``sure`` stopping rule (``ai.text.stopping``).

Costs one pass over the vocabulary's logits per token (~0.1 ms for SmolLM2's 49,152), against
~15 ms a token to decode. Knows nothing of documents or sockets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class BannedTokens:
    """Token ids by what they would do to an answer that has not started."""

    ends: np.ndarray  # end the turn: EOS and control tokens
    breaks: np.ndarray  # hold a line break

    @classmethod
    def of(cls, vocabulary: int, text_of: Callable[[int], str], eos: int) -> BannedTokens:
        ends, breaks = [], []
        for token in range(vocabulary):
            text = text_of(token)
            if token == eos or (text.startswith("<|") and text.endswith("|>")):
                ends.append(token)
            elif "\n" in text or "\r" in text:
                breaks.append(token)
        return cls(np.asarray(ends, dtype=np.intc), np.asarray(breaks, dtype=np.intc))


@dataclass(slots=True)
class Steering:
    """One generation's processor (``LogitsProcessorList([steering])``)."""

    prompt_tokens: int
    banned: BannedTokens
    text_of: Callable[[Sequence[int]], str]
    must_start: bool = False
    line_start: bool = False  # the prompt ends with a line break: breaks are not banned
    started: bool = False
    # Confidences of the tokens chosen since the last ``take``: the stream reads them as it
    # hands each piece on.
    pending: list[float] = field(default_factory=list)
    last: float | None = None

    def __call__(self, input_ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        if self.must_start and not self.started:
            written = input_ids[self.prompt_tokens :]
            self.started = bool(len(written)) and bool(self.text_of(written.tolist()).strip())
            if not self.started:
                logits[self.banned.ends] = -np.inf
                if not self.line_start:
                    logits[self.banned.breaks] = -np.inf
        top = float(np.max(logits))
        self.pending.append(float(1.0 / np.exp(logits - top).sum()))
        return logits

    def take(self) -> float | None:
        """The lowest confidence among the tokens chosen since the last call. A piece that
        comes with none new (llama-cpp-python held a line break back as a possible stop, then
        released it with the next token's text) shares the previous piece's."""
        if self.pending:
            self.last = min(self.pending)
            self.pending.clear()
        return self.last
