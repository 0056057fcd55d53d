"""A minimal third-party tgi backend."""

__version__ = "0.1.0"
