"""The sampler conformance checks, one suite for samplers of every framework: the framework-free cases
(`tgi.core.testing.sampling_cases`: greedy, seeded with every processor and penalty, grammar masks, the
watermark) against the plainly written reference (`reference_sampler.reference_sample`). Torch backends'
samplers run it inside `tgi.core.torch.testing.TorchBackendConformance` (`TorchSamplerConformance` there).

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

from tgi.core.testing.reference_sampler import reference_sample
from tgi.core.testing.sampling_cases import LOGPROB_TOLERANCE, SAMPLER_CASES, SamplerCase


class SamplerConformance:
    """Subclass as `Test<Name>...` and provide `sample(case)`."""

    #: whether the sampler applies grammar masks (when not, the engine refuses guided decoding by name)
    supports_token_masks: ClassVar[bool] = False

    def sample(self, case: SamplerCase) -> tuple[list[int], list[float]]:
        """The sampler's token and logprob for every row of `case` (its logits, rows and token masks)."""
        raise NotImplementedError

    def check_sampler(self, name: str) -> None:
        """Assert that `sample` gives the reference's tokens, and its logprobs within `LOGPROB_TOLERANCE`, on
        the case `name` of `SAMPLER_CASES` (skipped for a mask case when the sampler applies no masks)."""
        case = SAMPLER_CASES[name]()
        if case.token_masks is not None and not self.supports_token_masks:
            pytest.skip("this sampler does not apply grammar masks (guided decoding is refused)")
        tokens, logprobs = self.sample(case)
        ref = reference_sample(case.logits, case.rows, case.token_masks)
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
