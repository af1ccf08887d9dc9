"""``python -m omni_grpc.cli``: the same as the ``omni-grpc`` command."""

import sys

from omni_grpc.cli import main

sys.exit(main())
