"""Which routes a pooling model serves, by its kind (`PoolingSpec.kind`): what `/info` lists
(`pooling.routes`) and what the refusals of the other routes name."""

from __future__ import annotations

from tgi.core.interfaces.pooling import PoolingSpec
from tgi.core.validation import POOLING_OUTPUTS

#: every route of each kind of pooling model (all POST), whichever API defines it
POOLING_ROUTES: dict[str, tuple[str, ...]] = {
    "embed": ("/v1/embeddings", "/embed", "/embed_all", "/similarity", "/api/embed", "/api/embeddings"),
    "classify": (
        "/rerank", "/v1/rerank", "/v2/rerank", "/score", "/v1/score", "/predict", "/classify", "/v1/classify",
    ),
    "sparse": ("/embed_sparse",),
}  # fmt: skip
#: a classifier's routes that need one label (a cross-encoder's score): not served by one of more labels
ONE_LABEL_ROUTES = frozenset({"/rerank", "/v1/rerank", "/v2/rerank", "/score", "/v1/score"})


def served_routes(spec: PoolingSpec) -> list[str]:
    """The routes a pooling model of `spec` serves (POST), in `POOLING_ROUTES`' order."""
    routes = POOLING_ROUTES[spec.kind]
    if spec.kind == "classify" and spec.dimension != 1:
        return [r for r in routes if r not in ONE_LABEL_ROUTES]
    return list(routes)


def serves(spec: PoolingSpec) -> str:
    """What a pooling model of `spec` serves, in words with its routes, for refusals."""
    return f"{POOLING_OUTPUTS[spec.kind]} (POST {', '.join(served_routes(spec))})"
