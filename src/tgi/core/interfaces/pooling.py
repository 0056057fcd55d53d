"""What a pooling model makes of its final hidden states: part of the backend contract (versioned by
`INTERFACE_VERSION`; no torch here).

A pooling model (an embedder) is served by `tgi launch` when its folder says so as sentence-transformers
reads it (`modules.json` with a `Pooling` module, `tgi.core.loading.pooling_config`) or `--runner pooling`
forces it. Its requests are prefill-only sequences: the runner returns one pooled vector per request
(`StepOutput.pooled`) where a generation would sample a token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: how the hidden states of a prompt's tokens become one vector (sentence-transformers' pooling modes)
POOLING_MODES = ("cls", "mean", "lasttoken", "max")


@dataclass(frozen=True)
class PoolingSpec:
    """A pooling model's output as sentence-transformers computes it: `mode` over the final hidden states
    of the prompt's tokens (the first token's, their mean, the last token's, their element-wise max), then
    an L2 normalization where the model has a `Normalize` module. The runner returns the pooled vector
    before normalization; the server normalizes (`normalize`, or as the request asks: TEI's `normalize`)."""

    mode: str  # one of POOLING_MODES
    normalize: bool  # the model ends with a Normalize module (unit vectors)
    dimension: int  # the width of a pooled vector (the model's hidden size)
    # Matryoshka: the output may be cut to its first `dimensions` values (then normalized again) where the
    # model says it was trained so (`matryoshka_dimensions` / `is_matryoshka` in its config, or
    # sentence-transformers' `truncate_dim`); empty: only the full width is served, a request's
    # `dimensions` is refused by name. `()` with `matryoshka=True`: any width from 1 to `dimension`.
    matryoshka: bool = False
    matryoshka_dimensions: tuple[int, ...] = ()
    default_dimensions: int | None = (
        None  # sentence-transformers' `truncate_dim`: the width served by default
    )
    # sentence-transformers' prompts (`config_sentence_transformers.json`): a name -> the text put before the
    # input, and the one used when a request names none
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    source: str = "modules.json"  # where the spec came from ("modules.json" or "--runner pooling")

    def __post_init__(self) -> None:
        if self.mode not in POOLING_MODES:
            raise ValueError(f"pooling mode {self.mode!r} is not one of {', '.join(POOLING_MODES)}")

    def allows_dimensions(self, n: int) -> bool:
        """Whether a request may ask for the first `n` values of a vector (Matryoshka)."""
        if not self.matryoshka or not 1 <= n <= self.dimension:
            return False
        return not self.matryoshka_dimensions or n in self.matryoshka_dimensions
