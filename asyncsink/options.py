"""Options: frozen dataclasses built from Python keywords or from Spark's string options.

Every option group (the writer's ``SinkOptions``, each sink's options, the durable
options) is a frozen, keyword-only dataclass whose fields are declared with ``option()``.
One parser, ``parse_options``, turns Spark's case-insensitive string options into such
dataclasses (``"500"``, ``"5mb"``, ``"2s"``, ``"true"``) and rejects unknown keys; one
validator checks every value when the dataclass is built, whichever way it was built.
The Spark name of a field is its camelCase form: ``max_batch_size`` -> ``maxBatchSize``.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, TypeVar

from .errors import OptionError
from .masking import mask_url

__all__ = [
    "SPARK_OPTIONS",
    "OptionSpec",
    "Options",
    "SinkOptions",
    "option",
    "option_specs",
    "parse_options",
    "raise_unknown",
    "rule_of",
    "spark_name",
]

_MISSING: Any = dataclasses.MISSING

# The options of the Spark integration (``asyncsink.spark``): the scope of the call
# records and the generic data source's writer. A writer made outside Spark refuses them.
SPARK_OPTIONS = (
    "sinkId",
    "batchId",
    "recordStore",
    "recordStoreScope",
    "retainBatches",
    "writer",
)
_SIZE_UNITS = {
    **{unit: 1 for unit in ("", "b", "bytes")},
    **{unit: 1024 for unit in ("k", "kb", "kib")},
    **{unit: 1024**2 for unit in ("m", "mb", "mib")},
    **{unit: 1024**3 for unit in ("g", "gb", "gib")},
}
_TIME_UNITS = {"ms": 1, "": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}
_NUMBER_WITH_UNIT = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)\s*([a-z]*)\s*$")
_KIND_RULES = {
    "int": ("an integer", "", ""),
    "size": ("a size", " bytes", ", like 500, 64kb or 5mb"),
    "duration": ("a duration", " ms", ", like 500ms or 5s"),
    "float": ("a number", "", ""),
    "bool": ("true or false", "", ""),
    "str": ("a string", "", ""),
}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}

OptionsT = TypeVar("OptionsT", bound="Options")


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """What the parser, the validator and the docs know about one option."""

    name: str  # the dataclass field
    spark_name: str
    doc: str
    default: Any
    kind: str  # "int", "size", "duration", "float", "bool", "str", "choice", "object"
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    secret: bool = False
    required: bool = False  # no default: every use must give it


def option(
    default: Any = _MISSING,
    *,
    doc: str,
    kind: str | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    secret: bool = False,
    default_factory: Callable[[], Any] | None = None,
) -> Any:
    """Declare an option field: its documentation, how its string form parses, its bound.
    Without a default (and ``default_factory``) the option is required; its group is then
    a ``kw_only`` dataclass.

    ``kind`` defaults from the annotation; ``"size"`` accepts ``"5mb"``, ``"duration"``
    accepts ``"2s"`` (the value is kept in milliseconds).
    """
    metadata = {"doc": doc, "kind": kind, "minimum": minimum, "maximum": maximum, "secret": secret}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata, repr=not secret)
    return field(default=default, metadata=metadata, repr=not secret)


def spark_name(field_name: str) -> str:
    """``max_batch_size`` -> ``maxBatchSize``."""
    head, *rest = field_name.split("_")
    return head + "".join(part.capitalize() for part in rest)


class Options:
    """Base of every option group: validation on construction, secrets masked in ``repr``."""

    def __post_init__(self) -> None:
        for spec in option_specs(type(self)):
            _validate(spec, getattr(self, spec.name))

    def __repr__(self) -> str:
        parts = []
        for spec in option_specs(type(self)):
            parts.append(f"{spec.name}={self._shown(spec)}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def _shown(self, spec: OptionSpec) -> str:
        """How ``repr`` shows an option's value: a secret as ``'***'``, a URL (a string
        holding ``://``, or several of them) through ``mask_url``."""
        value = getattr(self, spec.name)
        if spec.secret and value:
            return "'***'"
        if isinstance(value, str) and "://" in value:
            return repr(mask_url(value))
        if isinstance(value, tuple | list) and any("://" in str(item) for item in value):
            return repr(type(value)(mask_url(item) for item in value))
        return repr(value)

    def core_defaults(self) -> Mapping[str, Any]:
        """Defaults a sink with these options gives the core ``SinkOptions`` (by field
        name), for the options a user leaves out."""
        return {}

    def check_core(self, core: SinkOptions) -> None:
        """Refuse core options a sink with these options cannot run with.

        Raises:
            OptionError: naming the option and its limit.
        """

    @classmethod
    def from_options(cls: type[OptionsT], raw: Mapping[str, Any]) -> OptionsT:
        """Build from Spark-style options; every key must belong to this group."""
        parsed, unknown = parse_options(cls, raw)
        if unknown:
            raise_unknown(unknown, [cls])
        return parsed


_SPEC_CACHE: dict[type, tuple[OptionSpec, ...]] = {}


def option_specs(cls: type) -> tuple[OptionSpec, ...]:
    """The options of a group, in declaration order."""
    cached = _SPEC_CACHE.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls)
    specs = []
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if "doc" not in meta:
            continue
        hint = hints[f.name]
        choices = _literal_choices(hint)
        kind = meta["kind"] or _kind_of(hint, choices)
        default = f.default if f.default is not _MISSING else None
        factory: Any = f.default_factory
        if factory is not _MISSING:
            default = factory()
        required = f.default is _MISSING and factory is _MISSING
        specs.append(
            OptionSpec(
                name=f.name,
                spark_name=spark_name(f.name),
                doc=meta["doc"],
                default=default,
                kind=kind,
                choices=choices,
                minimum=meta["minimum"],
                maximum=meta["maximum"],
                secret=meta["secret"],
                required=required,
            )
        )
    _SPEC_CACHE[cls] = result = tuple(specs)
    return result


def parse_options(
    cls: type[OptionsT],
    raw: Mapping[str, Any],
    defaults: Mapping[str, Any] | None = None,
    *,
    owner: str = "",
) -> tuple[OptionsT, dict[str, Any]]:
    """Build ``cls`` from the keys of ``raw`` it knows (case-insensitive Spark names or
    field names), and ``defaults`` (by field name) for those ``raw`` does not give; return
    it with the keys it did not know, for the next group to claim.

    Raises:
        OptionError: a value is not allowed, an option is given twice (in two
            spellings), or a required one is missing (``option 'url' is required by
            the http sink``, naming ``owner``: ``"the http sink"``).
    """
    by_key: dict[str, OptionSpec] = {}
    for spec in option_specs(cls):
        by_key[spec.spark_name.lower()] = spec
        by_key[spec.name.lower()] = spec
    values: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    unknown: dict[str, Any] = {}
    for key, value in raw.items():
        found = by_key.get(key.lower())
        if found is None:
            unknown[key] = value
            continue
        spec = found
        if spec.name in given_as and raw[given_as[spec.name]] != value:
            twice = f"{given_as[spec.name]!r} and {key!r}"
            message = (
                f"option {spec.spark_name!r} is given twice, as {twice}, with different "
                "values: give it once"
            )
            raise OptionError(spec.spark_name, None, rule_of(spec), message=message)
        given_as[spec.name] = key
        values[spec.name] = _from_string(spec, value) if isinstance(value, str) else value
    values = {**(defaults or {}), **values}
    for spec in option_specs(cls):
        if spec.required and spec.name not in values:
            message = f"option {spec.spark_name!r} is required by {owner or cls.__name__}"
            raise OptionError(spec.spark_name, None, rule_of(spec), message=message)
    return cls(**values), unknown


def raise_unknown(
    unknown: Mapping[str, Any], groups: Iterable[type], *, where: str = ""
) -> typing.NoReturn:
    """Raise the ``OptionError`` for the first of ``unknown`` (by name), suggesting the
    closest option of ``groups`` and listing them all (as options of ``where``, when
    given). Never shows a value: an unknown option may be a mistyped secret.

    Raises:
        OptionError: always.
    """
    known = sorted({spec.spark_name for group in groups for spec in option_specs(group)})
    name = sorted(unknown)[0]
    spark_only = {option.lower(): option for option in SPARK_OPTIONS}.get(name.lower())
    if spark_only is not None and spark_only not in known:
        message = (
            f"option {spark_only!r} belongs to the Spark entry points (foreach_batch, "
            "foreach_partition, the data sources); a writer made outside Spark keeps call "
            "records through call_log=CallLog(store, Scope(...)) instead"
        )
        raise OptionError(name, None, ", ".join(known), message=message)
    raise OptionError.unknown(name, known, where=where)


def rule_of(spec: OptionSpec) -> str:
    """What an option allows, in the words of its messages: ``an integer >= 1``, ``a size
    >= 1 bytes, like 500, 64kb or 5mb``, ``one of json, ndjson``..."""
    if spec.kind == "choice":
        return "one of " + ", ".join(spec.choices)
    noun, unit, example = _KIND_RULES.get(spec.kind, ("a value", "", ""))
    low, high = spec.minimum, spec.maximum
    if low is not None and high is not None:
        bound = f" from {low:g} to {high:g}{unit}"
    elif low is not None:
        bound = f" >= {low:g}{unit}"
    else:
        bound = f" <= {high:g}{unit}" if high is not None else ""
    return noun + bound + example


def _literal_choices(hint: Any) -> tuple[str, ...]:
    for arg in _union_args(hint):
        if typing.get_origin(arg) is Literal:
            return tuple(str(choice) for choice in typing.get_args(arg))
    return ()


def _union_args(hint: Any) -> tuple[Any, ...]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _kind_of(hint: Any, choices: tuple[str, ...]) -> str:
    if choices:
        return "choice"
    args = [a for a in _union_args(hint) if a is not type(None)]
    for kind, typ in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if args == [typ]:
            return kind
    return "object"


def _from_string(spec: OptionSpec, text: str) -> Any:
    value = text.strip()
    kind = spec.kind
    shown = "<hidden>" if spec.secret else text
    if kind == "bool":
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        raise OptionError(spec.spark_name, shown, rule_of(spec))
    if kind in ("int", "size", "duration"):
        units = {"int": {"": 1}, "size": _SIZE_UNITS, "duration": _TIME_UNITS}[kind]
        match = _NUMBER_WITH_UNIT.match(value.lower())
        if not match or match.group(2) not in units:
            raise OptionError(spec.spark_name, shown, rule_of(spec))
        try:
            number = Fraction(match.group(1)) * units[match.group(2)]  # exact
        except ValueError:  # more digits than Python turns into a number
            raise OptionError(spec.spark_name, shown, rule_of(spec)) from None
        if number.denominator != 1:
            raise OptionError(spec.spark_name, shown, rule_of(spec))
        return int(number)
    if kind == "float":
        try:
            return float(value)
        except ValueError:
            raise OptionError(spec.spark_name, shown, rule_of(spec)) from None
    if kind == "choice" and value.lower() in spec.choices:
        return value.lower()
    return text


def _validate(spec: OptionSpec, value: Any) -> None:
    if value is None and spec.default is None:
        return  # an optional option left unset
    shown = "<hidden>" if spec.secret else value
    types_of_kind = {
        "int": int,
        "size": int,
        "duration": int,
        "float": int | float,
        "bool": bool,
        "str": str,
    }
    expected = types_of_kind.get(spec.kind)
    wrong_type = expected is not None and (
        not isinstance(value, expected) or (spec.kind != "bool" and isinstance(value, bool))
    )
    if wrong_type or (spec.kind == "choice" and value not in spec.choices):
        raise OptionError(spec.spark_name, shown, rule_of(spec))
    if spec.minimum is not None and value is not None and not value >= spec.minimum:
        raise OptionError(spec.spark_name, shown, rule_of(spec))
    if spec.maximum is not None and value is not None and not value <= spec.maximum:
        raise OptionError(spec.spark_name, shown, rule_of(spec))


@dataclass(frozen=True, kw_only=True, repr=False)
class SinkOptions(Options):
    """Buffering hints, limits and retry policy of an ``AsyncSinkWriter``.

    Built from Python keywords (``SinkOptions(max_batch_size=100)``) or from Spark's string
    options (``SinkOptions.from_options({"maxBatchSize": "100"})``). Invalid values raise
    ``OptionError`` naming the option, the value and what is allowed.
    """

    max_batch_size: int = option(500, minimum=1, doc="Entries per request.")
    max_batch_size_in_bytes: int = option(
        5 * 1024 * 1024,
        kind="size",
        minimum=1,
        doc="Bytes per request (sum of entry sizes); at least `maxRecordSizeInBytes`, so "
        "below 1m set that lower too.",
    )
    max_record_size_in_bytes: int = option(
        1024 * 1024,
        kind="size",
        minimum=1,
        doc="An entry larger than this is a bad record (failed or dead-lettered).",
    )
    max_buffered_requests: int = option(
        10_000, minimum=1, doc="Buffered entries before `write` waits for room (backpressure)."
    )
    max_time_in_buffer_ms: int = option(
        5000,
        kind="duration",
        minimum=0,
        doc="The oldest buffered entry is sent at most this long after it was written.",
    )
    max_in_flight_requests: int = option(
        128,
        minimum=1,
        doc="Most requests in flight per writer. With `adaptiveConcurrency`, an upper "
        "bound; without it, a fixed number. See [Requests in "
        "flight](concepts.md#requests-in-flight).",
    )
    adaptive_concurrency: bool = option(
        True,
        doc="Adapt the requests in flight to their latency, as TCP Vegas does, and hand the "
        "limit on to the next writer. `false` keeps `maxInFlightRequests` in flight. "
        "See [Requests in flight](concepts.md#requests-in-flight).",
    )
    request_timeout_ms: int = option(
        60_000,
        kind="duration",
        minimum=1,
        doc="A request without a response by then is failed and retried.",
    )
    fail_on_timeout: bool = option(
        False, doc="Fail the task on a request timeout instead of retrying the request."
    )
    fail_fast_on_connection_refused: bool = option(
        True,
        doc="Fail the task at once when the destination refuses the connection and nothing "
        "was ever delivered to it from this Python process. A wrong URL then fails in a "
        "second. `false` always retries.",
    )
    max_retries: int = option(
        10, minimum=0, doc="Attempts after the first before an entry fails the barrier."
    )
    initial_backoff_ms: int = option(
        100,
        kind="duration",
        minimum=0,
        doc="Longest wait before the first retry; the bound doubles with each retry, and "
        "each wait is drawn at random below it (full jitter).",
    )
    max_backoff_ms: int = option(
        10_000,
        kind="duration",
        minimum=0,
        doc="Longest backoff; also caps a destination's Retry-After hint.",
    )
    rate_limiting: bool = option(
        True,
        doc="Adapt in-flight entries (AIMD): grow on success, halve when the destination "
        "throttles.",
    )
    ordering_key: str = option(
        "",
        kind="str",
        doc="Fields (comma-separated) whose values name a key: entries of one key are "
        "delivered in input order, one at a time. Empty: no order across requests.",
    )
    dead_letter: str | Callable[..., Any] | None = option(
        None,
        kind="object",
        doc="Where bad records go instead of failing the task: a directory URL every "
        "executor reaches (file://, s3://, gs://, abfss://, hdfs://), a JSON-lines file "
        "path, or (from Python) a callable taking a DeadLetter. See [Dead "
        "letters](errors.md#dead-letters).",
    )

    on_retries_exhausted: Literal["fail", "deadLetter"] = option(
        "fail",
        doc="An entry the destination answered with a retryable status until it ran out of "
        "retries: 'fail' fails the task; 'deadLetter' diverts it to `deadLetter` and goes "
        "on. See [Failure policy](guarantees.md#failure-policy).",
    )
    max_dead_letters: int = option(
        1000,
        minimum=0,
        doc="Most records one task hands to the dead letters (bad records and entries out "
        "of retries); the next one fails the task, saying how many went where.",
    )
    max_dead_letter_bytes: int = option(
        64 * 1024 * 1024,
        kind="size",
        minimum=1,
        doc="Most bytes of records one task hands to the dead letters, which a directory "
        "URL keeps in memory until the task's barrier; the next record fails the task.",
    )

    max_requests_per_second: float = option(
        0,
        minimum=0,
        doc="Requests a second for the whole job, split among the tasks that run at once "
        "(`rateCapShares`). 0: no cap. See [Rate caps](spark.md#rate-caps).",
    )
    max_entries_per_second: float = option(
        0, minimum=0, doc="Entries a second for the whole job, split as `maxRequestsPerSecond`."
    )
    max_bytes_per_second: int = option(
        0,
        kind="size",
        minimum=0,
        doc="Bytes of entries a second for the whole job, split as `maxRequestsPerSecond`.",
    )
    rate_cap_shares: int = option(
        0,
        minimum=0,
        doc="How many writers share the rate caps at once. 0: the Spark entry points set it "
        "to the cluster's cores; a writer outside Spark takes the whole cap.",
    )

    def __post_init__(self) -> None:
        exhausted = self.on_retries_exhausted
        if isinstance(exhausted, str) and exhausted.lower() in ("fail", "deadletter"):
            canonical = "fail" if exhausted.lower() == "fail" else "deadLetter"
            object.__setattr__(self, "on_retries_exhausted", canonical)
        Options.__post_init__(self)
        if self.on_retries_exhausted == "deadLetter" and self.dead_letter is None:
            raise OptionError(
                "onRetriesExhausted",
                self.on_retries_exhausted,
                "fail, unless deadLetter is set",
                message="option 'onRetriesExhausted' is 'deadLetter' but 'deadLetter' is not "
                "set: say where the dead letters go",
            )
        self._at_most("max_record_size_in_bytes", "max_batch_size_in_bytes")
        self._at_most("initial_backoff_ms", "max_backoff_ms")
        if self.ordering_key and not all(f.strip() for f in self.ordering_key.split(",")):
            raise OptionError("orderingKey", self.ordering_key, "field names, comma-separated")
        letter = self.dead_letter
        if isinstance(letter, str) and not letter.strip():
            raise OptionError("deadLetter", letter, "a file path or a callable, not blank")
        if not (letter is None or isinstance(letter, str)) and not callable(letter):
            raise OptionError("deadLetter", letter, "a file path or a callable")
        if isinstance(letter, str):
            _check_letter_url(letter)

    def _at_most(self, name: str, bound: str) -> None:
        """Option ``name`` may not exceed option ``bound``; the error says so, and when
        ``name`` was left at its default, that the ``bound`` given is below it."""
        value, limit = getattr(self, name), getattr(self, bound)
        if value <= limit:
            return
        rule = f"at most {spark_name(bound)} ({limit})"
        if value == next(f.default for f in dataclasses.fields(self) if f.name == name):
            rule += f"; {value} is its default, above the {spark_name(bound)} given: lower it too"
        raise OptionError(spark_name(name), value, rule)


def _check_letter_url(target: str) -> None:
    """A ``deadLetter`` URL must name a file system pyarrow opens.

    Raises:
        OptionError: it names another scheme.
    """
    from .policies.dead_letter_files import SCHEMES, directory_scheme

    scheme = directory_scheme(target)
    if scheme is not None and scheme not in SCHEMES:
        rule = "a directory URL of " + ", ".join(f"{s}://" for s in SCHEMES) + ", or a file path"
        raise OptionError("deadLetter", mask_url(target), rule)
