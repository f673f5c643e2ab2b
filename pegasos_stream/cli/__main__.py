"""``python -m pegasos_stream.cli``: the ``pegasos-stream`` command (for profilers and the like)."""

import sys

from .main import main

sys.exit(main())
