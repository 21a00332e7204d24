"""The options of the JSON contract, shared by every sink that writes rows as JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..errors import OptionError
from ..options import Options, option
from .json_rules import JsonContract

__all__ = ["JsonOptions"]


@dataclass(frozen=True, kw_only=True, repr=False)
class JsonOptions(Options):
    """``decimalAs`` and ``timeZone``: the choices of the JSON contract (see
    ``asyncsink.encoding.json_rules``)."""

    decimal_as: Literal["number", "string"] = option(
        "number",
        doc="How decimals are written: 'number' (12.50, every digit, as Spark's to_json "
        "writes them) or 'string' (\"12.50\", for readers that parse numbers as doubles).",
    )
    time_zone: str = option(
        "UTC",
        doc="The zone timestamps are written in: 'UTC' (2024-03-10T07:30:00.123456Z) or an "
        "IANA zone name such as 'America/New_York' (with its offset, -04:00).",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            JsonContract(decimal_as=self.decimal_as, time_zone=self.time_zone)
        except ValueError:
            raise OptionError("timeZone", self.time_zone, "'UTC' or an IANA zone name") from None

    @property
    def contract(self) -> JsonContract:
        """The JSON contract these options choose."""
        return JsonContract(decimal_as=self.decimal_as, time_zone=self.time_zone)
