"""The gRPC service: the servicer (reads and writes streams), the sessions and their hosts, the
audio edge, API keys, status mapping, and starting and stopping it all (``app``)."""
