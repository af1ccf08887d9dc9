"""The gRPC service: servicer, session hosts, auth, status mapping and process wiring."""
