"""RFC 3339 text of many timestamps at once, with numpy: fixed-width, no Python per value.

A timestamp of Spark's range (years 1 to 9999) counted in microseconds becomes
``YYYY-MM-DDTHH:MM:SS.ffffff`` and a suffix (``Z``, or none for TIMESTAMP_NTZ): always
the same width, so the text of a column is one byte matrix. The civil date comes from the
day count by the proleptic Gregorian arithmetic of Howard Hinnant's ``civil_from_days``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["timestamp_texts"]

_DAY_US = 86_400_000_000
_FIRST_US, _LAST_US = -62135596800000000, 253402300799999999
"""0001-01-01T00:00:00 and 9999-12-31T23:59:59.999999, in microseconds since 1970."""
_LAYOUT = b"0000-00-00T00:00:00.000000"
# (start, width, value) of each number written into the layout
_FIELDS = ((0, 4), (5, 2), (8, 2), (11, 2), (14, 2), (17, 2), (20, 6))


def timestamp_texts(micros: pa.Array, suffix: bytes) -> pa.Array | None:
    """The text of each value of an int64 array of microseconds since 1970 (nulls stay
    null), followed by ``suffix``; ``None`` when a value is outside years 1 to 9999."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = micros.fill_null(0).to_numpy(zero_copy_only=False)
    if len(values) and (values.min() < _FIRST_US or values.max() > _LAST_US):
        return None
    width = len(_LAYOUT) + len(suffix)
    out = np.frombuffer(_LAYOUT + suffix, np.uint8).reshape(1, width).repeat(len(values), 0)
    for (start, digits), number in zip(_FIELDS, _numbers(values), strict=True):
        for place in range(digits - 1, -1, -1):
            out[:, start + place] = 48 + number % 10
            number = number // 10
    offsets = np.arange(0, (len(values) + 1) * width, width, dtype=np.int32)
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(out.tobytes())]
    texts = pa.Array.from_buffers(pa.binary(), len(values), buffers)
    if micros.null_count:
        texts = pc.if_else(micros.is_valid(), texts, pa.scalar(None, pa.binary()))
    return texts


def _numbers(micros: np.ndarray[Any, Any]) -> list[np.ndarray[Any, Any]]:
    """Year, month, day, hour, minute, second and microsecond of each value."""
    days, time = np.divmod(micros, _DAY_US)
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2)
    seconds, fraction = np.divmod(time, 1_000_000)
    minutes, second = np.divmod(seconds, 60)
    hour, minute = np.divmod(minutes, 60)
    return [year, month, day, hour, minute, second, fraction]
