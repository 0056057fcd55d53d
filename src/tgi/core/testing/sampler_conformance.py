"""The sampler conformance checks, one suite for samplers of every framework: the framework-free cases
(`tgi.core.testing.sampling_cases`: greedy, seeded with every processor and penalty, grammar masks, the
watermark; `tgi.core.testing.extended_sampling_cases`: min-p, top-n-sigma, XTC, DRY, bad words, allowed
tokens, logits processors) against the plainly written reference (`reference_sampler.reference_sample`).
Torch backends' samplers run it inside `tgi.core.torch.testing.TorchBackendConformance`
(`TorchSamplerConformance` there). A sampler that refuses some parameters (`unsupported_sampling`, which its
runner reports as `RunnerCapabilities.unsupported_sampling`, so that the engine refuses them by name) skips
the cases that need them.

Use (a test module of the backend's package)::

    from tgi.core.testing.sampler_conformance import SamplerConformance

    class TestMySampler(SamplerConformance):
        supports_token_masks = True

        def sample(self, case):  # -> (token ids, logprobs) as lists, one per row
            ...
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest

from tgi.core.testing.extended_sampling_cases import EXTENDED_SAMPLER_CASES
from tgi.core.testing.reference_sampler import reference_sample
from tgi.core.testing.sampling_cases import LOGPROB_TOLERANCE, SAMPLER_CASES, SamplerCase

#: every case of the suite, by name
ALL_SAMPLER_CASES = {**SAMPLER_CASES, **EXTENDED_SAMPLER_CASES}


class SamplerConformance:
    """Subclass as `Test<Name>...` and provide `sample(case)`."""

    #: whether the sampler applies grammar masks (when not, the engine refuses guided decoding by name)
    supports_token_masks: ClassVar[bool] = False
    #: the `SamplingParams` fields the sampler refuses (the engine refuses requests that set them)
    unsupported_sampling: ClassVar[frozenset[str]] = frozenset()

    def sample(self, case: SamplerCase) -> tuple[list[int], list[float]]:
        """The sampler's token and logprob for every row of `case` (its logits, rows and token masks)."""
        raise NotImplementedError

    def check_sampler(self, name: str) -> None:
        """Assert that `sample` gives the reference's tokens, and its logprobs within `LOGPROB_TOLERANCE`, on
        the case `name` of `ALL_SAMPLER_CASES` (skipped for a mask case when the sampler applies no masks, and
        for a case that needs a parameter the sampler refuses)."""
        case = ALL_SAMPLER_CASES[name]()
        if case.token_masks is not None and not self.supports_token_masks:
            pytest.skip("this sampler does not apply grammar masks (guided decoding is refused)")
        refused = sorted(case.needs & self.unsupported_sampling)
        if refused:
            pytest.skip(f"this sampler refuses {', '.join(refused)} (the engine refuses it by name)")
        tokens, logprobs = self.sample(case)
        ref = reference_sample(case.logits, case.rows, case.token_masks, case.processors)
        assert list(tokens) == ref.token_ids
        np.testing.assert_allclose(
            np.asarray(logprobs, np.float64), ref.logprobs, atol=LOGPROB_TOLERANCE, rtol=LOGPROB_TOLERANCE
        )

    def test_greedy_matches_reference(self) -> None:
        self.check_sampler("greedy")

    def test_seeded_matches_reference(self) -> None:
        self.check_sampler("seeded")

    def test_grammar_masks_match_reference(self) -> None:
        self.check_sampler("masked")

    def test_watermark_matches_reference(self) -> None:
        self.check_sampler("watermarked")

    @pytest.mark.parametrize("name", sorted(EXTENDED_SAMPLER_CASES))
    def test_extended_sampling_matches_reference(self, name: str) -> None:
        """min-p, top-n-sigma, XTC, DRY, bad words, allowed tokens and logits processors."""
        self.check_sampler(name)
