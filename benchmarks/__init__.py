"""Benchmarks: bench.py (ours vs cuBLAS) and readme_table.py; a package so that tools/ can import bench helpers."""
