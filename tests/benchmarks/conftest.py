"""Make the repository's ``benchmarks`` package importable however pytest is started.

``python -m pytest`` puts the working directory on ``sys.path``; the ``pytest``
script does not, and ``benchmarks`` is not part of the installed distribution.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
