"""The generated Protobuf messages of the duplex contract, under one short name.

Everything inside the project says ``pb.ConverseRequest`` rather than the long generated path,
so that the generated package can move without touching its users.
"""

from omni_grpc.gen.omni.duplex.v1 import duplex_pb2 as pb

__all__ = ["pb"]
