"""Benchmarks for mqadmin's store against peer job-queue libraries (see bench/README.md)."""
