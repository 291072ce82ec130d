"""Benchmarks behind ``mqstore bench``: deterministic workloads, figures as JSON."""
