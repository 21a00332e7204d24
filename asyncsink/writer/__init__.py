"""The writer every destination subclasses: ``AsyncSinkWriter``.

A destination implements the contract in ``sink_contract``; everything else here is the
writer's own machinery and private to this package: the buffer (``_buffer``), the intake
of elements (``_intake``), one request (``_sending``), what its answer means
(``_outcomes``), requests recorded ahead (``_ahead``), recovery from the call log
(``_recovery``) and the writer's tasks (``_tasks``). The parts that can be swapped are in
``asyncsink.policies`` and are handed to the writer's constructor.
"""

from ._writer import AsyncSinkWriter, WriterSnapshot
from .sink_contract import Reconcile, SinkContract

__all__ = ["AsyncSinkWriter", "Reconcile", "SinkContract", "WriterSnapshot"]
