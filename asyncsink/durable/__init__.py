"""Durable call records: no re-send on replay, stable idempotency keys, fencing."""

from .call_log import CallLog
from .records import FAILED, PENDING, SUCCEEDED, CallRecord

__all__ = ["FAILED", "PENDING", "SUCCEEDED", "CallLog", "CallRecord"]
