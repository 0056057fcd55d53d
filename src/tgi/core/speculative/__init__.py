"""Speculative decoding: proposers of draft tokens, verified by the target model in one step."""

from tgi.core.speculative.draft_model import DraftModelProposer
from tgi.core.speculative.proposer import MedusaProposer, NgramProposer, Proposer

__all__ = ["DraftModelProposer", "MedusaProposer", "NgramProposer", "Proposer"]
