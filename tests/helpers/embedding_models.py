"""Tiny random-weight embedders saved with sentence-transformers itself (its `modules.json`, `Pooling` and
`Normalize` configs), and its own reading of them as the reference: a BERT (or XLM-RoBERTa) with mean
pooling and a Qwen3-shaped decoder with last-token pooling, cross-encoders, and a SPLADE sparse encoder."""

from __future__ import annotations

from pathlib import Path

#: the word-level vocabulary: four special tokens, then w0 .. w195
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + [f"w{i}" for i in range(196)]
#: XLM-RoBERTa's special tokens where its vocabulary has them (`<pad>` 1, its padding index), the same words
ROBERTA_WORDS = ["<s>", "<pad>", "</s>", "<unk>", *WORDS[4:]]


def _tokenizer(template: bool, token_types: bool = False):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    if template:  # BERT's [CLS] text [SEP]
        backend.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
        )
    names = ["input_ids", "token_type_ids", "attention_mask"] if token_types else None  # BERT's
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", eos_token="[SEP]",
        **({"model_input_names": names} if names else {}),
    )  # fmt: skip


def _roberta_tokenizer():
    """XLM-RoBERTa's template over the same words: `<s> a </s>`, a pair `<s> a </s></s> b </s>`, no token
    types (as its tokenizer's `model_input_names`)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(ROBERTA_WORDS)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
        model_input_names=["input_ids", "attention_mask"],
    )  # fmt: skip


def _encoder_config(kind: str, **extra):
    """A tiny `kind` ("bert", "xlmr" or "roberta") encoder's config: hidden 64, 2 layers, the words'
    vocabulary."""
    from transformers import BertConfig, RobertaConfig, XLMRobertaConfig

    shape = dict(
        vocab_size=len(WORDS), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, **extra,
    )  # fmt: skip
    if kind == "bert":
        return BertConfig(max_position_embeddings=128, **shape)
    if kind in ("xlmr", "roberta"):  # positions after the padding index 1, as (XLM-)RoBERTa's 514
        return (XLMRobertaConfig if kind == "xlmr" else RobertaConfig)(
            max_position_embeddings=130, type_vocab_size=1, pad_token_id=1, bos_token_id=0,
            eos_token_id=2, **shape,
        )  # fmt: skip
    raise ValueError(kind)


def save_embedder(
    folder: Path | str,
    kind: str,
    pooling: str,
    normalize: bool = True,
    prompts: dict[str, str] | None = None,
    seed: int = 0,
) -> Path:
    """A random `kind` ("bert", "xlmr", "roberta" or "qwen3") model with `pooling` ("mean", "cls", "lasttoken", "max") and a
    `Normalize` module where `normalize`, saved by sentence-transformers to `folder`."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers import models as st_modules
    from transformers import AutoModel, Qwen3Config, Qwen3Model

    folder = Path(folder)
    hf = folder.parent / f"{folder.name}_hf"
    torch.manual_seed(seed)
    if kind in ("bert", "xlmr", "roberta"):
        model = AutoModel.from_config(_encoder_config(kind))
    elif kind == "qwen3":
        config = Qwen3Config(
            vocab_size=len(WORDS), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
            tie_word_embeddings=True, eos_token_id=3, bos_token_id=2,
        )  # fmt: skip
        model = Qwen3Model(config)
    else:
        raise ValueError(kind)
    with torch.no_grad():  # large enough weights that the layers matter
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.2)
    model.save_pretrained(hf)
    roberta = kind in ("xlmr", "roberta")
    (_roberta_tokenizer() if roberta else _tokenizer(template=kind == "bert")).save_pretrained(hf)
    modules = [st_modules.Transformer(str(hf)), st_modules.Pooling(64, pooling)]
    if normalize:
        modules.append(st_modules.Normalize())
    st = SentenceTransformer(modules=modules, prompts=prompts or {})
    st.save(str(folder))
    return folder


def reference_embeddings(folder: Path | str, texts: list[str], prompt_name: str | None = None):
    """sentence-transformers' own embeddings of `texts` (float32 numpy [N, H])."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    return model.encode(texts, prompt_name=prompt_name, convert_to_numpy=True)


def reference_token_embeddings(folder: Path | str, texts: list[str]) -> list:
    """sentence-transformers' own token embeddings of `texts` (`output_value="token_embeddings"`: each text's
    final hidden states, float32 numpy [L_i, H], its padding dropped)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    return [t.numpy() for t in model.encode(texts, output_value="token_embeddings")]


def save_classifier(
    folder: Path | str, num_labels: int = 1, seed: int = 0, cross_encoder: bool = True, kind: str = "bert"
) -> Path:
    """A random `kind` ("bert", "xlmr" or "roberta") `*ForSequenceClassification` with `num_labels` labels (named
    `label_<i>`), saved by sentence-transformers' `CrossEncoder` (its modules.json and activation) where
    `cross_encoder`, else by transformers alone; its tokenizer makes pairs as the architecture's does (BERT's
    `[CLS] a [SEP] b [SEP]` with token types, (XLM-)RoBERTa's `<s> a </s></s> b </s>` without)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    folder = Path(folder)
    hf = folder.parent / f"{folder.name}_hf" if cross_encoder else folder
    torch.manual_seed(seed)
    labels = {i: f"label_{i}" for i in range(num_labels)}
    config = _encoder_config(
        kind, num_labels=num_labels, id2label=labels, label2id={v: k for k, v in labels.items()}
    )
    model = AutoModelForSequenceClassification.from_config(config)
    with torch.no_grad():  # large enough weights that the layers (and the token types) matter
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.2)
    model.save_pretrained(hf)
    roberta = kind in ("xlmr", "roberta")
    tokenizer = _roberta_tokenizer() if roberta else _tokenizer(template=True, token_types=True)
    tokenizer.save_pretrained(hf)
    if cross_encoder:
        from sentence_transformers import CrossEncoder

        CrossEncoder(str(hf), device="cpu").save(str(folder))
    return folder


def save_splade(
    folder: Path | str, seed: int = 0, prompts: dict[str, str] | None = None, older: bool = False
) -> Path:
    """A random BERT `BertForMaskedLM` saved by sentence-transformers' `SparseEncoder` as a SPLADE model
    (a fill-mask `Transformer`, or where `older` the `MLMTransformer` module earlier versions saved, then
    `SpladePooling` of max pooling and relu) to `folder`."""
    import torch
    from sentence_transformers import SparseEncoder
    from sentence_transformers.models import Transformer
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling
    from transformers import BertForMaskedLM

    folder = Path(folder)
    hf = folder.parent / f"{folder.name}_hf"
    torch.manual_seed(seed)
    model = BertForMaskedLM(_encoder_config("bert"))
    with torch.no_grad():  # large enough weights that the layers matter, and some logits are negative
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.2)
    model.save_pretrained(hf)
    _tokenizer(template=True).save_pretrained(hf)
    encoder = MLMTransformer(str(hf)) if older else Transformer(str(hf), transformer_task="fill-mask")
    modules = [encoder, SpladePooling(pooling_strategy="max")]
    SparseEncoder(modules=modules, prompts=prompts or {}).save(str(folder))
    return folder


def reference_sparse_embeddings(folder: Path | str, texts: list[str]):
    """sentence-transformers' `SparseEncoder.encode` of `texts`, dense (float32 numpy [N, vocab])."""
    from sentence_transformers import SparseEncoder

    model = SparseEncoder(str(folder), device="cpu")
    return model.encode(texts, convert_to_tensor=True).to_dense().numpy()
