"""Whether a model folder is a pooling model, and how it pools, read as sentence-transformers reads it
(no torch here).

sentence-transformers lists a model's modules in `modules.json`: the transformer, then a `Pooling` module
(its `config.json`: the pooling mode, in either of its two formats), maybe a `Normalize`. Its
`config_sentence_transformers.json` holds the prompts put before inputs (`prompts`, `default_prompt_name`)
and maybe `truncate_dim`. `--runner pooling` makes any supported model a pooling model (vLLM's
`--runner pooling`): the folder's modules where it has them, else last-token pooling of a decoder (CLS of an
encoder), normalized. What this slice does not serve is refused by name: other modules (Dense, ...), a
pooling that leaves the prompt out (`include_prompt: false`), several modes at once.

A `*ForSequenceClassification` folder (a classifier, or a cross-encoder as sentence-transformers'
`CrossEncoder` saves it: `modules.json` with its one `Transformer` module, `config_sentence_transformers.json`
with its `activation_fn`) is a classifier: its output is the head's logits over `id2label`'s labels.

A `*ForMaskedLM` folder is served only as sentence-transformers' `SparseEncoder` saves a SPLADE model:
`modules.json` with its `Transformer` (fill-mask; `MLMTransformer` in older versions) and a `SpladePooling` module (max pooling of `log(1 + relu(x))`;
another pooling or activation is refused by name): a sparse embedder, one weight per vocabulary entry.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from tgi.core.config import ConfigError
from tgi.core.interfaces.pooling import POOLING_MODES, PoolingSpec

#: `--runner`'s values: what `tgi launch` serves a model as
RUNNERS = ("auto", "generate", "pooling")
#: architectures that attend both ways (encoders): they only pool
ENCODER_ARCHITECTURES = ("BertModel", "XLMRobertaModel", "RobertaModel")
#: base models without a language-model head (what sentence-transformers saves of a decoder): they only pool
BASE_DECODER_ARCHITECTURES = ("LlamaModel", "Qwen2Model", "Qwen3Model")
# sentence-transformers' older Pooling config: one flag per mode
_MODE_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_lasttoken": "lasttoken",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
}
_MODULES = ("Transformer", "Pooling", "Normalize")
#: classifiers (`PoolingSpec.kind` "classify"): the head reads the first token's hidden state
CLASSIFIER_ARCHITECTURES = (
    "BertForSequenceClassification",
    "XLMRobertaForSequenceClassification",
    "RobertaForSequenceClassification",
)
#: classifiers whose model reads a pair's second segment (token type 1) from its separators (BERT's)
SEGMENT_CLASSIFIERS = ("BertForSequenceClassification",)
#: sparse embedders (`PoolingSpec.kind` "sparse", SPLADE): the masked-LM head's logits are pooled
SPARSE_ARCHITECTURES = ("BertForMaskedLM",)
# sentence-transformers' `activation_fn` classes -> `PoolingSpec.activation`
_ACTIVATIONS = {
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
    "torch.nn.modules.linear.Identity": "identity",
}


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot be read as JSON ({exc})") from None


def pooling_mode(config: dict[str, Any], where: str) -> str:
    """The mode of a sentence-transformers `Pooling` config (`pooling_mode: "mean"`, or the older
    `pooling_mode_mean_tokens: true` flags); `ConfigError` for none, several, or one not served."""
    if isinstance(config.get("pooling_mode"), str):
        modes = [config["pooling_mode"]]
    else:
        modes = [mode for flag, mode in _MODE_FLAGS.items() if config.get(flag)]
    if len(modes) != 1:
        raise ConfigError(f"{where}: one pooling mode expected, found {modes or 'none'}")
    if modes[0] not in POOLING_MODES:
        raise ConfigError(
            f"{where}: pooling mode {modes[0]!r} is not served (served: {', '.join(POOLING_MODES)})"
        )
    if config.get("include_prompt", True) is False:
        raise ConfigError(
            f"{where}: include_prompt=false (pooling without the prompt's tokens) is not served"
        )
    return modes[0]


def read_pooling(folder: str | Path | None, runner: str, hf_config: Any) -> PoolingSpec | None:
    """The pooling spec of the model in `folder` (None: a generative model) under `--runner runner`;
    `ConfigError` saying why a folder cannot be served as asked."""
    if runner not in RUNNERS:
        raise ConfigError(f"--runner {runner!r}: expected one of {', '.join(RUNNERS)}")
    archs = list(getattr(hf_config, "architectures", None) or [])
    pooling_only = any(a in ENCODER_ARCHITECTURES + BASE_DECODER_ARCHITECTURES for a in archs)
    root = Path(folder) if folder is not None and Path(folder).is_dir() else None
    modules = root / "modules.json" if root is not None else None
    if any(a in CLASSIFIER_ARCHITECTURES for a in archs):
        if runner == "generate":
            raise ConfigError(f"--runner generate: {archs[0]} is a classifier; it has no language-model head")
        return classifier_spec(root, hf_config)
    if any(a in SPARSE_ARCHITECTURES for a in archs):
        if runner == "generate":
            raise ConfigError(f"--runner generate: {archs[0]} is a masked LM; it does not generate")
        return sparse_spec(root, hf_config)
    if runner == "generate":
        if pooling_only:
            raise ConfigError(f"--runner generate: {archs[0]} has no language-model head; it only pools")
        return None
    if modules is None or not modules.exists():
        if runner == "auto" and not pooling_only:
            return None
        if runner == "auto":  # a base model or an encoder without sentence-transformers' modules
            raise ConfigError(
                f"{archs[0]} has no language-model head and its folder no modules.json: serve it with "
                "--runner pooling"
            )
        mode = "cls" if any(a in ENCODER_ARCHITECTURES for a in archs) else "lasttoken"
        return _spec(root, hf_config, mode, normalize=True, source="--runner pooling")
    mode, normalize = None, False
    for module in _json(modules):
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind not in _MODULES:
            raise ConfigError(
                f"{modules}: module {module.get('type')!r} is not served (served: {', '.join(_MODULES)})"
            )
        if kind == "Pooling":
            config_path = root / module.get("path", "") / "config.json"
            mode = pooling_mode(_json(config_path), str(config_path))
        normalize = normalize or kind == "Normalize"
    if mode is None:
        raise ConfigError(f"{modules}: no Pooling module")
    return _spec(root, hf_config, mode, normalize, source="modules.json")


def _spec(root: Path | None, hf_config: Any, mode: str, normalize: bool, source: str) -> PoolingSpec:
    st_path = root / "config_sentence_transformers.json" if root is not None else None
    st = _json(st_path) if st_path is not None and st_path.exists() else {}
    dimension = int(hf_config.hidden_size)
    dims = tuple(int(d) for d in getattr(hf_config, "matryoshka_dimensions", None) or ())
    truncate = st.get("truncate_dim")
    matryoshka = bool(dims) or bool(getattr(hf_config, "is_matryoshka", False)) or truncate is not None
    if truncate is not None and (not isinstance(truncate, int) or not 1 <= truncate <= dimension):
        raise ConfigError(f"{st_path}: truncate_dim {truncate!r} is not a width from 1 to {dimension}")
    prompts = st.get("prompts") or {}
    default = st.get("default_prompt_name")
    if default is not None and default not in prompts:
        raise ConfigError(f"{st_path}: default_prompt_name {default!r} is not one of its prompts")
    return PoolingSpec(
        mode=mode,
        normalize=normalize,
        dimension=dimension,
        matryoshka=matryoshka,
        matryoshka_dimensions=dims,
        default_dimensions=truncate,
        prompts={str(k): str(v) for k, v in prompts.items()},
        default_prompt_name=default,
        source=source,
    )


def classifier_spec(root: Path | None, hf_config: Any) -> PoolingSpec:
    """A `*ForSequenceClassification` model's spec: its labels (`id2label`, in logit order) and the
    activation of its scores (sentence-transformers' `activation_fn` where its folder has one, else
    `CrossEncoder`'s default: sigmoid for one label, identity for more); `ConfigError` for modules or an
    activation not served."""
    modules = root / "modules.json" if root is not None else None
    if modules is not None and modules.exists():
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in _json(modules)]
        if kinds != ["Transformer"]:
            raise ConfigError(f"{modules}: a classifier's modules must be one Transformer, found {kinds}")
    id2label = getattr(hf_config, "id2label", None) or {}
    n = int(getattr(hf_config, "num_labels", 0) or len(id2label))
    labels = tuple(str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(n))
    st_path = root / "config_sentence_transformers.json" if root is not None else None
    st = _json(st_path) if st_path is not None and st_path.exists() else {}
    given = st.get("activation_fn") or (getattr(hf_config, "sentence_transformers", None) or {}).get(
        "activation_fn"
    )
    if given is None:
        activation = "sigmoid" if n == 1 else "identity"
    elif given in _ACTIVATIONS:
        activation = _ACTIVATIONS[given]
    else:
        raise ConfigError(f"activation_fn {given!r} is not served (served: {', '.join(_ACTIVATIONS)})")
    return PoolingSpec(
        mode="cls", normalize=False, dimension=n, kind="classify", labels=labels, activation=activation,
        source="config.json",
    )  # fmt: skip


def sparse_spec(root: Path | None, hf_config: Any) -> PoolingSpec:
    """A SPLADE model's spec (its `SparseEncoder` modules: `MLMTransformer`, `SpladePooling` of max pooling
    and relu), one weight per vocabulary entry, with its prompts; `ConfigError` naming what is not served."""
    modules = root / "modules.json" if root is not None else None
    if modules is None or not modules.exists():
        raise ConfigError(
            f"{hf_config.architectures[0]} is served only as a SPLADE model saved by sentence-transformers' "
            "SparseEncoder (modules.json with MLMTransformer and SpladePooling); its folder has no modules.json"
        )
    listed = _json(modules)
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in listed]
    if kinds not in (["MLMTransformer", "SpladePooling"], ["Transformer", "SpladePooling"]):
        raise ConfigError(
            f"{modules}: a sparse embedder's modules must be MLMTransformer, SpladePooling: {kinds}"
        )
    config_path = root / listed[1].get("path", "") / "config.json"
    config = _json(config_path)
    for key, served in (("pooling_strategy", "max"), ("activation_function", "relu")):
        if config.get(key, served) != served:
            raise ConfigError(f"{config_path}: {key} {config.get(key)!r} is not served (served: {served})")
    st_path = root / "config_sentence_transformers.json"
    st = _json(st_path) if st_path.exists() else {}
    for key in ("max_active_dims", "truncate_dim"):  # keeping only the largest weights, or the first ones
        if st.get(key) is not None:
            raise ConfigError(f"{st_path}: {key} is not served for a sparse embedder")
    spec = _spec(root, hf_config, "max", normalize=False, source="modules.json")
    dimension = int(hf_config.vocab_size)
    return replace(spec, kind="sparse", dimension=dimension, matryoshka=False, matryoshka_dimensions=())
