"""omni-grpc: self-hosted full-duplex speech serving.

A gRPC server and an OpenAI-Realtime websocket bridge over one sans-io session core.
"""

__version__ = "0.1.0"
