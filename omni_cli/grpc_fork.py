"""Turns gRPC's fork support off for the ``omni-grpc`` processes, before gRPC is imported.

gRPC's fork support hooks fork() (pthread_atfork) so that a child may go on using gRPC after a
bare fork. Every child of ours runs exec at once (espeak-ng for the embedded engine's speech,
the benchmark's servers), so the hooks only cost: uvloop starts subprocesses with fork(), and at
each start gRPC either pauses its threads until the fork is done or, when a call is in flight,
logs "Other threads are currently calling into gRPC, skipping fork() handlers". Starting
subprocesses another way would quiet one caller and leave the hooks on every other fork.

gRPC reads GRPC_ENABLE_FORK_SUPPORT once, when it is imported, so ``omni_cli`` imports
this module before anything else; the children inherit it. An operator's own value is kept.
"""

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
