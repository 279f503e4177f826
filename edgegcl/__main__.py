"""``python -m edgegcl ...``: the same command line as the ``edgegcl`` script."""

import sys

from edgegcl.cli.main import main

sys.exit(main())
