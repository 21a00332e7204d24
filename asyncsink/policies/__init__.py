"""The parts of a writer that can be swapped, each behind a small contract: the retry
policy (``retry``), congestion control (``congestion``) with its two in-flight limits (the
request limit, ``request_limit``, and the entry window, ``entry_window``), and what
happens to a bad record (``dead_letter``)."""
