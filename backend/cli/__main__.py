"""``python -m backend.cli``: the ``headscope`` command."""

import sys

from backend.cli import main

sys.exit(main())
