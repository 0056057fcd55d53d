"""Guided decoding: outputs constrained by a JSON schema, a regex or a Lark grammar (llguidance)."""

from tgi.core.guided.grammar import Grammar, GrammarError

__all__ = ["Grammar", "GrammarError"]
