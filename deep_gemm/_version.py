# The one place the version is written: pyproject.toml reads it for the distribution metadata.
__version__ = "0.1.0"
