"""Tests of the sans-io session core (``omni_grpc.core``)."""
