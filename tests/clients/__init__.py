"""Tests of the clients in other languages (clients/), run against the real server."""
