"""Status-code rules of the HTTP sink: which statuses mean delivered, retry, or a bad record.

Three options, each a list of codes and ranges (``200-299,409``):

- ``successStatusCodes`` (default ``200-299``): the entry, or every entry of the request,
  is delivered. A whole answer of a 2xx status is then read for per-entry items; one of
  another success status (``409`` from an endpoint that says "already have it") counts
  every entry of the request delivered, and its body is not read.
- ``retryStatusCodes`` (default ``408,409,425,429,500-599``): sent again after a backoff;
  ``429`` and ``503`` also slow the writer down.
- ``badRecordStatusCodes`` (default none): the entry, or every entry of the request, is a
  bad record: dead-lettered with ``deadLetter``, else the task fails naming it.

A status in none of them is fatal for a whole answer (the task fails at once with the
status and a body excerpt) and a bad record for an item, as before these options.

An option left out takes its default less the codes the others name, so
``successStatusCodes=200-299,409`` alone moves 409 out of the retried statuses; two
options given that name one code are an ``OptionError``, as is a code outside 100-599.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from asyncsink.errors import OptionError

from ..web.classify import THROTTLE_STATUSES

__all__ = ["DEFAULT_RETRY", "DEFAULT_SUCCESS", "StatusRules", "parse_codes"]

DEFAULT_SUCCESS = "200-299"
DEFAULT_RETRY = "408,409,425,429,500-599"
_RULE = "HTTP status codes (100-599) and ranges, comma-separated, like 200-299,409"


def parse_codes(option: str, value: str | Iterable[int] | None) -> frozenset[int] | None:
    """The codes an option names (``None``: not given).

    Raises:
        OptionError: not a list of codes and ranges from 100 to 599.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        try:
            codes = frozenset(value)
        except TypeError:
            raise OptionError(option, value, _RULE) from None
        if not all(type(code) is int and 100 <= code <= 599 for code in codes):
            raise OptionError(option, sorted(codes, key=str), _RULE)
        return codes
    found: set[int] = set()
    for part in value.split(","):
        part = part.strip()
        if not part:
            if value.strip():
                raise OptionError(option, value, _RULE)
            continue
        low, dash, high = part.partition("-")
        try:
            first = int(low.strip())
            last = int(high.strip()) if dash else first
        except ValueError:
            raise OptionError(option, value, _RULE) from None
        if not 100 <= first <= last <= 599:
            raise OptionError(option, value, _RULE)
        found.update(range(first, last + 1))
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class StatusRules:
    """What each status means, for whole answers and for per-entry items (see the
    module)."""

    success: frozenset[int]
    retry: frozenset[int]
    bad_record: frozenset[int]

    @classmethod
    def from_options(
        cls,
        success: str | Iterable[int] | None,
        retry: str | Iterable[int] | None,
        bad_record: str | Iterable[int] | None,
    ) -> StatusRules:
        """The rules the three options give (``None``: left out, the default less the
        codes the others name).

        Raises:
            OptionError: a value is not a list of codes, or two options name one code.
        """
        given = {
            "successStatusCodes": parse_codes("successStatusCodes", success),
            "retryStatusCodes": parse_codes("retryStatusCodes", retry),
            "badRecordStatusCodes": parse_codes("badRecordStatusCodes", bad_record),
        }
        names = list(given)
        for i, first in enumerate(names):
            for second in names[i + 1 :]:
                a, b = given[first], given[second]
                common = (a & b) if a is not None and b is not None else frozenset()
                if common:
                    shown = ",".join(map(str, sorted(common)[:5]))
                    raise OptionError(
                        second,
                        ",".join(map(str, sorted(b or ()))) if b and len(b) <= 10 else shown,
                        f"codes that {first} does not name",
                        message=f"options {first!r} and {second!r} both name {shown}: "
                        "a status has one meaning",
                    )
        named = frozenset().union(*(codes for codes in given.values() if codes is not None))
        defaults = {
            "successStatusCodes": parse_codes("successStatusCodes", DEFAULT_SUCCESS),
            "retryStatusCodes": parse_codes("retryStatusCodes", DEFAULT_RETRY),
            "badRecordStatusCodes": frozenset[int](),
        }
        final = {
            name: codes if codes is not None else (defaults[name] or frozenset()) - named
            for name, codes in given.items()
        }
        return cls(
            final["successStatusCodes"], final["retryStatusCodes"], final["badRecordStatusCodes"]
        )

    @property
    def is_default(self) -> bool:
        return self == _DEFAULT

    def delivered(self, status: int) -> bool:
        return status in self.success

    def retried(self, status: int) -> bool:
        return status in self.retry

    def throttled(self, status: int) -> bool:
        return status in self.retry and status in THROTTLE_STATUSES

    def bad(self, status: int) -> bool:
        """Whether a whole answer of ``status`` makes its entries bad records (an item of
        a status neither delivered nor retried always is one)."""
        return status in self.bad_record


_DEFAULT = StatusRules.from_options(None, None, None)
