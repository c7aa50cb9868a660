"""``python -m spade_memory.cli``: the ``spade-memory`` command."""

from __future__ import annotations

import sys

from . import main

sys.exit(main())
