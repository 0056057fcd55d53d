"""Guided decoding: outputs constrained by a JSON schema, a regex or a Lark grammar (llguidance)."""

from tgi.core.guided.grammar import CompilerBusyError, Grammar, GrammarError, StructuralTag

__all__ = ["CompilerBusyError", "Grammar", "GrammarError", "StructuralTag"]
