"""The high-throughput loader for prepared WebDatasets and the shared host-to-device transfer stage."""
