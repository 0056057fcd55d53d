"""Swapping the served model without dropping a request: the swapper, its memory estimate, its operator route."""
