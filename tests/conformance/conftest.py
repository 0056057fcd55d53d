"""Conformance tests: see tests/conftest.py for TRITON_INTERPRET (set before triton is first imported)."""
