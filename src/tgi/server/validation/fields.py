"""No request field is accepted and then ignored.

Request models allow extra fields so that they can be told apart: a field some API defines that this server
does not serve (an image content part, TGI's `adapter_id`...) is refused by name with a
422; a field no API defines is dropped, and the dropped fields of a request are
logged in one bounded warning line. A known field sent with the value that asks for
the API's default behaviour (`null`, `best_of: 1`, `modalities: ["text"]`...) is what
the server does anyway, and passes.

This is the first of a request's checks, on its HTTP shape only (see `tgi.core.validation` for who checks
what after it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from tgi.server.http.errors import escaped, unsupported

log = logging.getLogger("tgi.server")

NEUTRAL = (None,)  # the values of a known field that ask for nothing we do not do


class RequestModel(BaseModel):
    """A request body (or part of one): strict types (a string where a number belongs is a 422, as serde
    gives it); extra fields kept in `model_extra` for `check_fields`.

    `KNOWN` names the fields other APIs define that this model does not serve, each with its neutral values.
    """

    model_config = ConfigDict(strict=True, extra="allow")
    KNOWN: ClassVar[dict[str, tuple[Any, ...]]] = {}

    def refusals(self) -> Iterator[tuple[str, str]]:
        """Declared fields whose value asks for something unsupported: (field, why)."""
        return iter(())


#: the longest list of ignored field names a request's warning shows (cut here)
MAX_LOGGED_FIELDS_CHARS = 200


def check_fields(model: BaseModel) -> None:
    """Raise the 422 for the first field `model` (and its nested models) asks for and we do not serve;
    drop the fields no API defines, with one warning line per request that names them (escaped as `repr`
    escapes them, so that no control character reaches the log; at most `MAX_LOGGED_FIELDS_CHARS` of names)."""
    ignored: list[str] = []
    _check(model, "", ignored)
    if ignored:
        log.warning(
            "ignored %d request field(s) that no API this server implements defines: %s",
            len(ignored),
            bounded(", ".join(f"`{escaped(name)}`" for name in ignored), MAX_LOGGED_FIELDS_CHARS),
        )


def bounded(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, ending with `...` when cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check(model: BaseModel, path: str, ignored: list[str]) -> None:
    if isinstance(model, RequestModel):
        for name, why in model.refusals():
            raise unsupported(path + name, why)
        known = type(model).KNOWN
        for name, value in (model.model_extra or {}).items():
            if name in known:
                if not _neutral(value, known[name]):
                    raise unsupported(path + name)
            else:
                ignored.append(path + name)
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            _check(value, f"{path}{name}.", ignored)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    _check(item, f"{path}{name}[{i}].", ignored)


def _neutral(value: Any, neutral: tuple[Any, ...]) -> bool:
    return any(value == n and type(value) is type(n) for n in neutral) or value in ([], {})
