"""The parts of a writer that can be swapped, each behind a small contract.

A writer is handed its retry policy and its congestion strategy (``AsyncSinkWriter``'s
``retry_policy=`` and ``congestion=``); without them it builds today's defaults from its
options:

- ``RetryPolicy`` (``retry``): classify a failure, back off, give up; ``BackoffRetry``.
- ``CongestionStrategy`` (``congestion``): how much may be in flight; ``Congestion``,
  which composes two in-flight limits, each handed to it or built from the options:
  ``RequestLimit`` (``request_limit``; ``ConcurrencyLimiter``, learned from latency) and
  ``EntryWindow`` (``entry_window``; ``AIMDWindow`` on entries in flight).
- What happens to a bad record: ``DeadLetter`` targets (``dead_letter``).
- What happens to entries the destination answered until they ran out of retries
  (``exhausted``, the ``onRetriesExhausted`` option; ``AsyncSinkWriter(exhausted=...)``):
  ``ExhaustedEntries``; ``FailTask`` (the default) or ``DivertToDeadLetters``.
- A writer's share of the job's rate caps (``rate_cap``; ``AsyncSinkWriter(rate_cap=...)``):
  ``RateCap``, token buckets.
"""

from .congestion import Congestion, CongestionStrategy
from .dead_letter import DeadLetter, JsonLinesDeadLetter
from .entry_window import AIMDWindow, EntryWindow
from .exhausted import DivertToDeadLetters, ExhaustedEntries, FailTask
from .rate_cap import RateCap
from .request_limit import ConcurrencyLimiter, RequestLimit
from .retry import BackoffRetry, ErrorKind, RetryPolicy

__all__ = [
    "AIMDWindow",
    "BackoffRetry",
    "ConcurrencyLimiter",
    "Congestion",
    "CongestionStrategy",
    "DeadLetter",
    "DivertToDeadLetters",
    "EntryWindow",
    "ErrorKind",
    "ExhaustedEntries",
    "FailTask",
    "JsonLinesDeadLetter",
    "RateCap",
    "RequestLimit",
    "RetryPolicy",
]
