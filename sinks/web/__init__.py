"""What the sinks that talk HTTP (``http``, ``elasticsearch``) share, so that neither
borrows from the other.

- ``writer``: ``HttpClientWriter``, the writer base that sends every request through one
  transport, and request-body compression;
- ``options``: the credential and TLS options, URL and header checks;
- ``clients``: the clients a process shares per event loop and configuration;
- ``transport``: the transport contract, how a request goes out and its answer comes
  back; ``aiohttp_transport`` and ``httpx_transport``: the two that send;
- ``classify``: what statuses, ``Retry-After`` and requests without an answer mean;
- ``answer``: how a JSON answer with per-entry items is read;
- ``redact``: keeping credentials out of messages and logs.
"""
