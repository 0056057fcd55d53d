"""The table's flags about the OpenAI Responses store (`tgi.server.responses.store`): how many responses
`POST /v1/responses` keeps for `GET /v1/responses/{id}` and `previous_response_id`, and for how long."""

from __future__ import annotations

from tgi.server.flags import value_checks
from tgi.server.flags.spec import Flag, Server

RESPONSES = "OpenAI Responses"

RESPONSES_FLAGS = (
    Flag(
        ("--responses-store-max-entries",),
        "responses of POST /v1/responses kept in memory for GET /v1/responses/{id} and `previous_response_id` "
        "(OpenAI's `store`, true by default); the oldest go first past it; 0: none kept, and `store: true` "
        "and `previous_response_id` are refused",
        RESPONSES,
        Server("responses_store_max_entries"),
        env=("RESPONSES_STORE_MAX_ENTRIES",),
        parse=int,
        default=1024,
        at_least=0,
        example="16",
    ),
    Flag(
        ("--responses-store-max-age",),
        "seconds a stored response is kept, > 0",
        RESPONSES,
        Server("responses_store_max_age_s"),
        env=("RESPONSES_STORE_MAX_AGE",),
        parse=float,
        default=3600.0,
        check=value_checks.deadline,
        example="600",
    ),
    Flag(
        ("--responses-store-max-bytes",),
        "bytes the stored responses may hold together (their JSON, data-URL images included); the oldest go "
        "first past it, and a response larger than all of it is not stored (the log says so)",
        RESPONSES,
        Server("responses_store_max_bytes"),
        env=("RESPONSES_STORE_MAX_BYTES",),
        parse=int,
        default=64 * 2**20,
        at_least=1,
        example="1000000",
    ),
)
