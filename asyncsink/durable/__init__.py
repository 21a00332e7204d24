"""Durable call records: no re-send on replay, stable idempotency keys, fencing."""

from .call_log import CallLog
from .calls import DurableContext, SyncDurableContext, current_key
from .records import FAILED, PENDING, SUCCEEDED, CallRecord
from .retention import purge_scopes

__all__ = [
    "FAILED",
    "PENDING",
    "SUCCEEDED",
    "CallLog",
    "CallRecord",
    "DurableContext",
    "SyncDurableContext",
    "current_key",
    "purge_scopes",
]
