"""Helpers for tests and benchmarks (a real S3 server on loopback, generated datasets). Not used at runtime."""
