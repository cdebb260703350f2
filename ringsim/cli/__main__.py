"""``python -m ringsim.cli``: the ``ringsim`` command."""

import sys

from ringsim.cli import main

sys.exit(main())
