"""Ollama's `options` as `SamplingParams`.

Served: `temperature` (0 is greedy), `top_k` (0 is off), `top_p`, `min_p`, `typical_p`, `seed` (a negative
seed: none), `num_predict` (-1 or -2: up to what is left of the context), `stop`, `repeat_penalty`,
`presence_penalty`, `frequency_penalty`. The defaults are Ollama's documented ones where the sampler does
what they ask: `temperature` 0.8, `top_k` 40, `top_p` 0.9. Ollama's default `repeat_penalty` of 1.1 looks at
the last 64 tokens only (`repeat_last_n`), a window this sampler has not: no repetition penalty unless
asked, and then over every token of the sequence.

`repeat_last_n` is accepted where it asks for that window: -1 (or the server's context length, `num_ctx`),
or 0 with no penalty given. `mirostat` 0, `tfs_z` 1 and `penalize_newline` false ask for what is done
anyway. The load-time settings are the server's, fixed at launch: `num_ctx` is accepted where it equals the
context length (`--max-total-tokens`), `num_batch` where it equals `--max-batch-prefill-tokens`; the others
(`num_gpu`, `main_gpu`, `num_thread`, `use_mmap`, ...) and `num_keep` (no context shifting here) are refused
by name, as is any other option, with a 400 that names it.
"""

from __future__ import annotations

from typing import Any

from tgi.core.config import EngineConfig
from tgi.core.sampling_params import SamplingParams
from tgi.server.http.errors import unsupported, validation_error
from tgi.server.service.settings import ServerSettings
from tgi.server.validation.sampling import check_stop

#: Ollama's documented defaults that this sampler serves as they are
DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.9}

# option -> its JSON type ("number", "integer", "boolean", "strings")
_SAMPLING = {
    "temperature": "number",
    "top_k": "integer",
    "top_p": "number",
    "min_p": "number",
    "typical_p": "number",
    "seed": "integer",
    "num_predict": "integer",
    "stop": "strings",
    "repeat_penalty": "number",
    "presence_penalty": "number",
    "frequency_penalty": "number",
    "repeat_last_n": "integer",
}
# options that ask for nothing more at these values
_NEUTRAL = {"mirostat": (0,), "tfs_z": (1, 1.0), "penalize_newline": (False,)}
_LOAD_TIME = (
    "numa", "num_gpu", "main_gpu", "low_vram", "f16_kv", "logits_all", "vocab_only", "use_mmap",
    "use_mlock", "embedding_only", "num_thread",
)  # fmt: skip
_NOT_SERVED = {
    "num_keep": "is not served: this server shifts no context (a prompt too long is refused)",
    "mirostat_tau": "is not served: mirostat sampling is not served here",
    "mirostat_eta": "is not served: mirostat sampling is not served here",
}


def _typed(name: str, value: Any, kind: str) -> Any:
    field = f"options.{name}"
    ok = {
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "strings": isinstance(value, list) and all(isinstance(v, str) for v in value),
    }[kind]
    if not ok:
        what = "a list of strings" if kind == "strings" else f"a {kind}"
        raise validation_error(f"`{field}` must be {what}, got {value!r}", field)
    return value


def _load_time(name: str, value: Any, config: EngineConfig) -> None:
    """A load-time option: accepted where it is the server's own value."""
    field = f"options.{name}"
    own = {"num_ctx": config.max_total_tokens, "num_batch": config.max_batch_prefill_tokens}
    if name in own:
        _typed(name, value, "integer")
        if value != own[name]:
            flag = "--max-total-tokens" if name == "num_ctx" else "--max-batch-prefill-tokens"
            raise unsupported(
                field, f"is a load-time setting: this server's is {own[name]} ({flag}), fixed at launch"
            )
        return
    raise unsupported(field, "is a load-time setting: this server's are fixed at launch")


def _checked(options: dict[str, Any], config: EngineConfig) -> dict[str, Any]:
    """The sampling options, each of its type; every other option accepted where it asks for nothing more,
    else refused by name."""
    given = {}
    for name, value in options.items():
        field = f"options.{name}"
        if value is None:
            continue
        if name in _SAMPLING:
            given[name] = _typed(name, value, _SAMPLING[name])
        elif name in _NEUTRAL:
            if not any(value == v and type(value) is type(v) for v in _NEUTRAL[name]):
                raise unsupported(field, f"is only served as {_NEUTRAL[name][0]!r} (off)")
        elif name in ("num_ctx", "num_batch") or name in _LOAD_TIME:
            _load_time(name, value, config)
        elif name in _NOT_SERVED:
            raise unsupported(field, _NOT_SERVED[name])
        else:
            raise validation_error(f"`{field}` is not an option this server knows", field)
    return given


def _max_new_tokens(value: int | None) -> int | None:
    if value is None or value in (-1, -2):
        return None
    if value < 1:
        raise validation_error(
            f"`options.num_predict` must be >= 1, or -1 (-2) for up to the context's end. Given: {value}",
            "options.num_predict",
        )
    return value


def _check_window(given: dict[str, Any], config: EngineConfig) -> None:
    window = given.get("repeat_last_n")
    if window is None or window in (-1, config.max_total_tokens):
        return
    penalties = ("repeat_penalty", "presence_penalty", "frequency_penalty")
    neutral = {"repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
    if window == 0 and all(given.get(p, neutral[p]) == neutral[p] for p in penalties):
        return
    raise unsupported(
        "options.repeat_last_n",
        "is only served as -1: the penalties here look at every token of the sequence (0 with no penalty)",
    )


def sampling_params(
    options: dict[str, Any] | None, settings: ServerSettings, config: EngineConfig
) -> SamplingParams:
    """`options` as the request's sampling parameters (module docstring); the engine checks their ranges."""
    given = {**DEFAULTS, **_checked(options or {}, config)}
    _check_window(given, config)
    greedy = given["temperature"] == 0
    seed = given.get("seed")
    return SamplingParams(
        do_sample=not greedy,
        temperature=1.0 if greedy else float(given["temperature"]),
        top_k=max(given["top_k"], 0),
        top_p=float(given["top_p"]),
        min_p=float(given.get("min_p", 0.0)),
        typical_p=float(given.get("typical_p", 1.0)),
        seed=None if seed is None or seed < 0 else seed,
        max_new_tokens=_max_new_tokens(given.get("num_predict")),
        stop=check_stop(given.get("stop", []), settings),
        repetition_penalty=float(given.get("repeat_penalty", 1.0)),
        presence_penalty=float(given.get("presence_penalty", 0.0)),
        frequency_penalty=float(given.get("frequency_penalty", 0.0)),
        include_stop_str_in_output=False,  # Ollama's text ends before the stop sequence
    )
