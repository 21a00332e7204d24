"""Connections and clients the sinks and the record stores share: telling a failed
connection from other failures, which destinations this process reached, and how long a
pooled connection may sit idle (``connections``)."""
