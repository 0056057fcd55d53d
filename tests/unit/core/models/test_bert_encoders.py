"""The encoders over transformers' modules (`tgi.core.models.bert`): XLM-RoBERTa's padded rows against
transformers' own model run on each row alone (its positions numbered after the padding index), its context
length, and the settings not served refused by name."""

from __future__ import annotations

import pytest
import torch
from helpers.embedding_models import _encoder_config

from tgi.core.models.bert import XLMRobertaClassifier, XLMRobertaEncoder
from tgi.core.models.registry import UnsupportedModelError


def test_padded_rows_equal_each_row_alone():
    from transformers import XLMRobertaModel

    torch.manual_seed(0)
    config = _encoder_config("xlmr")
    reference = XLMRobertaModel(config, add_pooling_layer=False).eval()
    encoder = XLMRobertaEncoder(config, dtype=torch.float32, device="cpu").eval()
    encoder.load_weights(reference.state_dict().items())
    rows = [[0, 5, 6, 7, 8, 9, 2], [0, 10, 2], [0, 11, 12, 2]]
    flat = torch.tensor([t for row in rows for t in row])
    positions = torch.tensor([p for row in rows for p in range(len(row))])
    with torch.no_grad():
        got = encoder(flat, positions, None)
        want = torch.cat([reference(input_ids=torch.tensor([row])).last_hidden_state[0] for row in rows])
    assert (got - want).abs().max() < 1e-5


def test_context_length_leaves_out_the_positions_before_the_first_token():
    config = _encoder_config("xlmr", num_labels=1)  # 130 positions, padding index 1
    model = XLMRobertaClassifier(config, dtype=torch.float32, device="cpu")
    assert model.text_config.max_position_embeddings == 128


@pytest.mark.parametrize("key", ["is_decoder", "add_cross_attention"])
def test_a_decoders_settings_are_refused_by_name(key):
    config = _encoder_config("xlmr", **{key: True})
    with pytest.raises(UnsupportedModelError, match=f"XLMRobertaModel: {key}"):
        XLMRobertaEncoder(config, dtype=torch.float32, device="cpu")
