"""The table's flags about chat templates in requests (`tgi.server.chat.template`): whether a request may bring
a template of its own."""

from __future__ import annotations

from tgi.server.flags.spec import Flag, Server

TEMPLATES = "chat templates"

TEMPLATE_FLAGS = (
    Flag(
        ("--trust-request-chat-template",),
        "let chat requests (OpenAI's chat completions, /chat_tokenize) bring their own `chat_template` and "
        "`documents` (vLLM's flag): a request's template is code the server runs, rendered in Jinja's sandbox "
        "as the model's is; off by default: they get a 422 that names this flag",
        TEMPLATES,
        Server("trust_request_chat_template"),
        env=("TRUST_REQUEST_CHAT_TEMPLATE",),
        kind="switch",
        default=False,
        example="true",
    ),
)
