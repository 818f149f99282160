"""``python -m backend.cli``: the ``headscope`` command (``backend.cli.main``), as the service's
``serve`` starts it and the tests run it."""

import sys

from backend.cli import main

sys.exit(main())
