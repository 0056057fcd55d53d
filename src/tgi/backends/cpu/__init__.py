"""The CPU reference backend."""
