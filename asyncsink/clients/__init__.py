"""Clients the sinks and the record stores share: one per event loop, kind and key
(``per_loop``), telling a failed connection from other failures, which destinations this
process reached, and how long a pooled connection may sit idle (``connections``)."""
