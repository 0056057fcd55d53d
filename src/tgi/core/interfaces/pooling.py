"""What a pooling model makes of its final hidden states: part of the backend contract (versioned by
`INTERFACE_VERSION`; no torch here).

A pooling model (an embedder) is served by `tgi launch` when its folder says so as sentence-transformers
reads it (`modules.json` with a `Pooling` module, `tgi.core.loading.pooling_config`) or `--runner pooling`
forces it. Its requests are prefill-only sequences: the runner returns one pooled vector per request
(`StepOutput.pooled`) where a generation would sample a token.

A classifier (`kind` "classify": a `*ForSequenceClassification` checkpoint, cross-encoders among them) is a
pooling model too: its pooled output is its classification head's logits, one per label, read from the
pooled hidden state of the whole prompt (a text, or two texts as one pair) by the model's own head.

A sparse embedder (`kind` "sparse": SPLADE, a `*ForMaskedLM` checkpoint saved by sentence-transformers'
`SparseEncoder` with a `SpladePooling` module) pools its masked-LM head's logits: each token's
`log(1 + relu(logits))` over the vocabulary, max-pooled over the prompt's tokens, one value per vocabulary
entry (`dimension` is the vocabulary's size), of which most are zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: how the hidden states of a prompt's tokens become one vector (sentence-transformers' pooling modes)
POOLING_MODES = ("cls", "mean", "lasttoken", "max")
#: what a pooling model's output is: a vector to embed with, a classifier's logits (one per label), or a
#: sparse embedder's vocabulary weights
POOLING_KINDS = ("embed", "classify", "sparse")
#: what makes a classifier's logits into its scores (sentence-transformers' `CrossEncoder` activations)
ACTIVATIONS = ("sigmoid", "identity")


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
    source: str = (
        "modules.json"  # where the spec came from ("modules.json", "--runner pooling", "config.json")
    )
    # "embed": the pooled hidden state is the output; "classify": the model's classification head (its
    # `classify([N, hidden]) -> [N, labels]`) makes it into logits, `dimension` of them, one per label;
    # "sparse": the model's masked-LM head (its `token_logits([L, hidden]) -> [L, vocab]`), each token's
    # `log(1 + relu(logits))`, pooled by `mode` ("max"): `dimension` values, one per vocabulary entry
    kind: str = "embed"
    # a classifier's labels in logit order (its config's `id2label`); empty for an embedder
    labels: tuple[str, ...] = ()
    # a classifier's default scores from its logits, as its `CrossEncoder` computes them (its folder's
    # `activation_fn`, else sigmoid for one label and identity for more); None for an embedder
    activation: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in POOLING_MODES:
            raise ValueError(f"pooling mode {self.mode!r} is not one of {', '.join(POOLING_MODES)}")
        if self.kind not in POOLING_KINDS:
            raise ValueError(f"pooling kind {self.kind!r} is not one of {', '.join(POOLING_KINDS)}")
        if self.kind == "classify" and (
            len(self.labels) != self.dimension or self.activation not in ACTIVATIONS
        ):
            raise ValueError("a classifier's spec has one label per logit and an activation of ACTIVATIONS")
        if self.kind == "sparse" and (self.mode != "max" or self.normalize):
            raise ValueError("a sparse embedder's spec max-pools its token weights, not normalized")

    def allows_dimensions(self, n: int) -> bool:
        """Whether a request may ask for the first `n` values of a vector (Matryoshka)."""
        if not self.matryoshka or not 1 <= n <= self.dimension:
            return False
        return not self.matryoshka_dimensions or n in self.matryoshka_dimensions
