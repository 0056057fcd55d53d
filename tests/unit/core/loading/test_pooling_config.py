"""A folder read as sentence-transformers reads it: whether it is a pooling model, its pooling mode (in both
of sentence-transformers' Pooling config formats), Normalize, prompts, Matryoshka widths; `--runner`; what is
not served refused by name."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tgi.core.config import ConfigError
from tgi.core.loading.pooling_config import read_pooling

DECODER = SimpleNamespace(architectures=["Qwen3Model"], hidden_size=32)
CAUSAL = SimpleNamespace(architectures=["LlamaForCausalLM"], hidden_size=32)
BERT = SimpleNamespace(architectures=["BertModel"], hidden_size=32)


def _folder(
    tmp: Path, pooling: dict | None, normalize: bool = True, st: dict | None = None, extra=()
) -> Path:
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    if pooling is not None:
        modules.append(
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}
        )
        (tmp / "1_Pooling").mkdir()
        (tmp / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    if normalize:
        modules.append(
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
        )
    modules += [{"idx": 3, "name": "3", "path": "3", "type": t} for t in extra]
    (tmp / "modules.json").write_text(json.dumps(modules))
    if st is not None:
        (tmp / "config_sentence_transformers.json").write_text(json.dumps(st))
    return tmp


@pytest.mark.parametrize(
    ("config", "mode"),
    [
        ({"pooling_mode": "mean", "embedding_dimension": 32}, "mean"),
        ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, "cls"),
        ({"pooling_mode_lasttoken": True}, "lasttoken"),
        ({"pooling_mode_max_tokens": True}, "max"),
    ],
)
def test_both_pooling_config_formats(tmp_path, config, mode):
    spec = read_pooling(_folder(tmp_path, config), "auto", DECODER)
    assert (spec.mode, spec.normalize, spec.dimension, spec.matryoshka) == (mode, True, 32, False)


def test_prompts_and_matryoshka(tmp_path):
    st = {"prompts": {"query": "q: ", "document": ""}, "default_prompt_name": "query", "truncate_dim": 16}
    spec = read_pooling(_folder(tmp_path, {"pooling_mode": "mean"}, normalize=False, st=st), "auto", BERT)
    assert spec.prompts == {"query": "q: ", "document": ""} and spec.default_prompt_name == "query"
    assert not spec.normalize and spec.default_dimensions == 16 and spec.allows_dimensions(8)
    assert not spec.allows_dimensions(33)
    dims = SimpleNamespace(architectures=["Qwen3Model"], hidden_size=32, matryoshka_dimensions=[8, 16])
    spec = read_pooling(tmp_path, "auto", dims)
    assert spec.allows_dimensions(16) and not spec.allows_dimensions(12)


def test_runner_decides(tmp_path):
    assert read_pooling(tmp_path, "auto", CAUSAL) is None  # no modules.json: a generative model
    forced = read_pooling(tmp_path, "pooling", CAUSAL)
    assert (forced.mode, forced.normalize, forced.source) == ("lasttoken", True, "--runner pooling")
    assert read_pooling(tmp_path, "pooling", BERT).mode == "cls"
    xlmr = SimpleNamespace(architectures=["XLMRobertaModel"], hidden_size=32)
    assert read_pooling(tmp_path, "pooling", xlmr).mode == "cls"  # an encoder too
    with pytest.raises(ConfigError, match="--runner pooling"):
        read_pooling(tmp_path, "auto", DECODER)  # a base model without modules.json
    _folder(tmp_path, {"pooling_mode": "mean"})
    assert read_pooling(tmp_path, "generate", CAUSAL) is None
    with pytest.raises(ConfigError, match="no language-model head"):
        read_pooling(tmp_path, "generate", DECODER)
    with pytest.raises(ConfigError, match="--runner"):
        read_pooling(tmp_path, "embed", DECODER)


@pytest.mark.parametrize(
    ("pooling", "extra", "words"),
    [
        ({"pooling_mode": "weightedmean"}, (), "weightedmean"),
        ({"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True}, (), "one pooling mode"),
        ({"pooling_mode": "mean", "include_prompt": False}, (), "include_prompt"),
        ({"pooling_mode": "mean"}, ("sentence_transformers.models.Dense",), "Dense"),
        (None, (), "no Pooling module"),
    ],
)
def test_what_is_not_served_is_refused_by_name(tmp_path, pooling, extra, words):
    with pytest.raises(ConfigError, match=words):
        read_pooling(_folder(tmp_path, pooling, extra=extra), "auto", DECODER)


CLASSIFIER = SimpleNamespace(
    architectures=["BertForSequenceClassification"],
    hidden_size=32,
    num_labels=2,
    id2label={0: "neg", 1: "pos"},
)


def test_a_classifier_is_its_labels_and_activation(tmp_path):
    spec = read_pooling(_folder(tmp_path, None, normalize=False), "auto", CLASSIFIER)
    assert (spec.kind, spec.mode, spec.labels, spec.dimension) == ("classify", "cls", ("neg", "pos"), 2)
    assert spec.activation == "identity"  # CrossEncoder's default for more than one label
    one = SimpleNamespace(architectures=CLASSIFIER.architectures, hidden_size=32, num_labels=1, id2label={})
    assert read_pooling(None, "auto", one).activation == "sigmoid"
    reranker = SimpleNamespace(**{**vars(one), "architectures": ["XLMRobertaForSequenceClassification"]})
    assert (read_pooling(None, "auto", reranker).kind, read_pooling(None, "auto", reranker).activation) == (
        "classify",
        "sigmoid",
    )


def test_a_classifier_refuses_what_it_cannot_serve(tmp_path):
    with pytest.raises(ConfigError, match="--runner generate"):
        read_pooling(None, "generate", CLASSIFIER)
    st = {"activation_fn": "torch.nn.modules.activation.Tanh"}
    with pytest.raises(ConfigError, match=r"activation_fn '\S+Tanh' is not served"):
        read_pooling(_folder(tmp_path, None, normalize=False, st=st), "auto", CLASSIFIER)
    with pytest.raises(ConfigError, match="one Transformer"):
        read_pooling(_folder(tmp_path, {"pooling_mode": "cls"}, normalize=False), "auto", CLASSIFIER)
