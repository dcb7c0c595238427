"""The AI pipeline's error tree; third-party errors are wrapped where they enter.

AiError                        a suggestion request failed; ``code`` goes on the wire
├── Busy                       the scheduler's bounded queue is full: try again shortly
├── QuotaExceeded              this connection (or token subject) has its share of the model
                               queued or running already: wait for one of its own to finish
├── BadRequest                 the request cannot be served (position outside the document)
├── Forbidden                  the editor's scope does not allow it (accept needs write)
├── ConfirmRequired            an accept of a rewrite that drops content (numbers, dates,
│                              names...) without ``confirm_dropped``: nothing is applied
└── ProviderError              the model provider failed
    ├── ProviderTimeout        it did not answer in time
    ├── ProviderUnavailable    it cannot be reached or refused the request
    │   └── UpstreamDown       a model upstream is down, overloaded (429) or silent before
    │                          its first token: the pool moves the request on
    │                          (``ai.model.providers.openai``)
    └── ModelUnavailable       the model worker died, hung or is off: AI is unavailable
                               for now (sync goes on; the reason says why)
"""

from __future__ import annotations


class AiError(Exception):
    code = "internal"


class Busy(AiError):
    code = "busy"


class QuotaExceeded(AiError):
    code = "quota"


class BadRequest(AiError):
    code = "bad_request"


class Forbidden(AiError):
    code = "forbidden"


class ConfirmRequired(AiError):
    code = "confirm_required"


class ProviderError(AiError):
    code = "provider_error"


class ProviderTimeout(ProviderError):
    code = "provider_timeout"


class ProviderUnavailable(ProviderError):
    code = "provider_unavailable"


class ModelUnavailable(ProviderError):
    code = "unavailable"


class UpstreamDown(ProviderUnavailable):
    """The upstream could not be reached, said it is down or overloaded, or did not answer in
    time: nothing was generated, so another upstream may take the request
    (``ai.model.providers.pool``). ``retry_after``: how long it asked to be left alone (429)."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
