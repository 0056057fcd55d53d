"""A classifier's inputs as the scoring path makes them, with a BERT-style word tokenizer: a pair as BERT's
tokenizer makes it, one too long refused naming its field or cut at its document's end or start (never the
query), a text holding the separator refused (where the model reads segments: BERT's); the activations."""

from __future__ import annotations

import math

import pytest
from helpers.embedding_models import _roberta_tokenizer, _tokenizer

from tgi.core.interfaces.pooling import PoolingSpec
from tgi.server.http.errors import ApiError
from tgi.server.service.scoring import (
    ScoreInput,
    activated,
    checked_segments,
    encoded,
    probabilities,
    reads_segments,
)

TOKENIZER = _tokenizer(template=True, token_types=True)
DOC = " ".join(f"w{i}" for i in range(10, 30))  # 20 words


def pair(doc: str = DOC) -> ScoreInput:
    return ScoreInput(("w1 w2", doc), "texts[3]", "query")


def test_a_pair_is_the_tokenizers_pair():
    assert encoded(TOKENIZER, pair(), 64, None) == TOKENIZER("w1 w2", DOC)["input_ids"]


def test_too_long_is_refused_naming_the_field():
    with pytest.raises(ApiError) as exc:
        encoded(TOKENIZER, pair(), 10, None)
    assert exc.value.status == 422 and "`texts[3]`" in exc.value.message and exc.value.param == "texts"


@pytest.mark.parametrize(
    ("direction", "kept"), [("right", ["w10", "w11", "w12", "w13"]), ("left", ["w26", "w27", "w28", "w29"])]
)
def test_truncation_cuts_the_document_only(direction, kept):
    ids = encoded(TOKENIZER, pair(), 9, direction)  # [CLS] w1 w2 [SEP] + 4 words + [SEP]
    assert len(ids) == 9
    assert TOKENIZER.convert_ids_to_tokens(ids) == ["[CLS]", "w1", "w2", "[SEP]", *kept, "[SEP]"]


def test_a_query_that_fills_the_limit_alone_is_named():
    with pytest.raises(ApiError) as exc:
        encoded(TOKENIZER, pair(), 4, "right")
    assert "`query`" in exc.value.message and exc.value.param == "query"


def test_a_text_holding_the_separator_is_refused():
    x = pair("w3 [SEP] w4")
    with pytest.raises(ApiError) as exc:
        checked_segments(encoded(TOKENIZER, x, 64, None), x)
    assert "separator" in exc.value.message and exc.value.param == "texts"
    checked_segments(encoded(TOKENIZER, pair(), 64, None), pair())  # a plain pair passes


def test_only_a_classifier_that_reads_segments_checks_them():
    """XLM-RoBERTa's pair `<s> a </s></s> b </s>` holds three separators and its model reads no segments:
    the separator check is BERT's classifier's alone."""
    assert reads_segments("BertForSequenceClassification (transformers modules, bidirectional)")
    assert not reads_segments("XLMRobertaForSequenceClassification (transformers modules, bidirectional)")
    ids = encoded(_roberta_tokenizer(), pair(), 64, None)
    assert ids.count(2) == 3 and ids[:4] == [0, 5, 6, 2]


def test_activations():
    spec = PoolingSpec("cls", False, 1, kind="classify", labels=("l",), activation="sigmoid")
    assert activated(spec, 0.0) == 0.5
    assert (
        activated(PoolingSpec("cls", False, 1, kind="classify", labels=("l",), activation="identity"), 2.0)
        == 2.0
    )
    probs = probabilities([1.0, 2.0, 3.0])
    assert math.isclose(sum(probs), 1.0) and probs == sorted(probs)
    assert probabilities([0.0]) == [0.5]
