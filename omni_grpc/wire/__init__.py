"""The vocabulary every layer shares, and nothing else: the contract's messages (``pb``), the
audio facts (canonical formats, sample widths, rates), which command and event kinds go
together, how API keys are checked, what one API key gets (``tenant_policy``), and the numeric
bounds of the contract's fields. It imports
only the generated code and the standard library, so that everything else may import it.
"""

from omni_grpc.wire.pb import pb

__all__ = ["pb"]
