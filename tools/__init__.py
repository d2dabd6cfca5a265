"""Contributor scripts for the GPU machine, run from the repo root as modules (`python -m tools.<name> --help`)."""
