"""``python -m roleserve_core`` is the ``roleserve`` command."""

import sys

from roleserve_core.cli import main

sys.exit(main())
