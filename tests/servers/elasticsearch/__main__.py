"""``python -m tests.servers.elasticsearch``: serve the endpoint until interrupted."""

import sys

from .server import main

sys.exit(main())
