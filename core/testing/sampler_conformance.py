"""The sampler conformance checks for samplers of any framework (JAX, a vendor's): the same framework-free
cases (`tgi.core.testing.sampling_cases`) and the same reference (`reference_sampler.reference_sample`)
that torch backends' samplers meet through `tgi.core.torch.testing.TorchBackendConformance`.

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

    def _check(self, name: str) -> None:
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
        self._check("greedy")

    def test_seeded_matches_reference(self) -> None:
        self._check("seeded")

    def test_grammar_masks_match_reference(self) -> None:
        self._check("masked")

    def test_watermark_matches_reference(self) -> None:
        self._check("watermarked")
