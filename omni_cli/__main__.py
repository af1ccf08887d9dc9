"""``python -m omni_cli``: the same as the ``omni-grpc`` command."""

import sys

from omni_cli import main

sys.exit(main())
