"""What crosses between the processes of a group, as data and never as pickles: JSON, with dataclasses as
objects of their fields, each field checked against its annotation on the way in (`from_data`: an unknown,
missing or mistyped field is a `WireError` naming it), and arrays as a declared dtype and shape over their
base64 bytes, under a size cap. Torch-free."""

from __future__ import annotations

import base64
import dataclasses
import json
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

import numpy as np

#: the most bytes one message may have (a step of long prompts with grammar masks stays far below)
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
#: the dtypes an array may declare
ARRAY_DTYPES = ("int32", "int64", "float32", "uint8", "bool")


class WireError(ValueError):
    """A message that is not what its receiver expects (a bug, another version, or not from this group)."""


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def loads(data: bytes, what: str, limit: int = MAX_MESSAGE_BYTES) -> Any:
    if len(data) > limit:
        raise WireError(f"{what}: {len(data)} bytes, more than the {limit} allowed")
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError(f"{what}: not JSON ({exc})") from None


def sent_fields(cls: type) -> list[dataclasses.Field]:
    """The fields that travel: those set at init that count in equality (`compare=False`: local only)."""
    return [f for f in dataclasses.fields(cls) if f.init and f.compare]


def to_data(value: Any) -> Any:
    """`value` as JSON data: a dataclass as an object of its sent fields, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_data(getattr(value, f.name)) for f in sent_fields(type(value))}
    if isinstance(value, list | tuple):
        return [to_data(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_data(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return array_to_data(value)
    return value


def _hints(cls: type) -> dict[str, Any]:
    # named only under TYPE_CHECKING where they are used (sampling_params, config): every annotation is
    # evaluated here, a field that does not travel too
    from tgi.core.kv_events.events import KVEventsConfig
    from tgi.core.watermark import Watermark

    return typing.get_type_hints(cls, localns={"Watermark": Watermark, "KVEventsConfig": KVEventsConfig})


def from_data(cls: type, data: Any, what: str) -> Any:
    """An instance of dataclass `cls` from `to_data`'s object, every field present and of its type."""
    if not isinstance(data, dict):
        raise WireError(f"{what}: expected an object, got {type(data).__name__}")
    hints, names = _hints(cls), [f.name for f in sent_fields(cls)]
    unknown, missing = set(data) - set(names), set(names) - set(data)
    if unknown or missing:
        raise WireError(f"{what}: unknown field(s) {sorted(unknown)}, missing field(s) {sorted(missing)}")
    kwargs = {name: check(data[name], hints[name], f"{what}.{name}") for name in names}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise WireError(f"{what}: {exc}") from None


def check(value: Any, tp: Any, what: str) -> Any:
    """`value` (JSON data) as type `tp`, or `WireError`."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return value
    if tp is type(None):
        if value is None:
            return None
    elif origin in (Union, types.UnionType):
        for option in args:
            try:
                return check(value, option, what)
            except WireError:
                continue
    elif origin is Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
    elif tp is bool or tp is str:
        if type(value) is tp:
            return value
    elif tp is int:
        if type(value) is int:
            return value
    elif tp is float:
        if type(value) in (int, float):
            return float(value)
    elif origin in (tuple, list) and isinstance(value, list):
        if origin is list:
            return [check(v, args[0], f"{what}[{i}]") for i, v in enumerate(value)]
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(check(v, args[0], f"{what}[{i}]") for i, v in enumerate(value))
        if len(args) == len(value):
            return tuple(
                check(v, t, f"{what}[{i}]") for i, (v, t) in enumerate(zip(value, args, strict=True))
            )
    elif origin is dict and isinstance(value, dict):
        return {k: check(v, args[1], f"{what}[{k!r}]") for k, v in value.items()}
    elif dataclasses.is_dataclass(tp):
        return from_data(tp, value, what)
    raise WireError(f"{what}: {_short(value)} is not a {getattr(tp, '__name__', tp)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def array_to_data(array: np.ndarray) -> dict[str, Any]:
    array = np.ascontiguousarray(array)
    if array.dtype.name not in ARRAY_DTYPES:
        raise WireError(f"an array of {array.dtype} is not sent (only {', '.join(ARRAY_DTYPES)})")
    return {"dtype": array.dtype.name, "shape": list(array.shape), "data": base64.b64encode(array).decode()}


def array_from_data(data: Any, what: str, limit: int = MAX_MESSAGE_BYTES) -> np.ndarray:
    """The array of `array_to_data`, its dtype one of `ARRAY_DTYPES` and its bytes those its shape declares."""
    if not isinstance(data, dict) or set(data) != {"dtype", "shape", "data"}:
        raise WireError(f"{what}: expected an array's dtype, shape and data")
    dtype, shape = data["dtype"], check(data["shape"], tuple[int, ...], f"{what}.shape")
    if dtype not in ARRAY_DTYPES or any(n < 0 for n in shape):
        raise WireError(f"{what}: dtype {_short(dtype)}, shape {shape} refused")
    size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    if size > limit or not isinstance(data["data"], str):
        raise WireError(f"{what}: {size} bytes declared, more than the {limit} allowed, or no data")
    try:
        raw = base64.b64decode(data["data"].encode(), validate=True)
    except ValueError as exc:  # binascii.Error
        raise WireError(f"{what}: its data is not base64 ({exc})") from None
    if len(raw) != size:
        raise WireError(f"{what}: {len(raw)} bytes for a {dtype} array of shape {shape} ({size})")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
