"""The launcher's flags, declared once: every flag of `tgi launch` is one `Flag` here (by topic in the modules
below), and nothing else declares one. The parser and `--help` (`tgi.server.flags.arguments`), the start-up
checks (`tgi.server.flags.checks`), the engine's and the server's settings (`tgi.server.flags.destinations`)
and the documentation's compatibility table and flag reference (`python -m tgi.server.flags --update
docs/reference/flags.md`) are made from `FLAGS`.

`UNSERVED_VARIABLES` are TGI's environment variables that are no launcher flag and that this server does not
act on: each one set is named in a warning at start, never silently ignored.
"""

from __future__ import annotations

from tgi.server.flags.model_flags import MODEL_FLAGS
from tgi.server.flags.operator_flags import OPERATOR_FLAGS
from tgi.server.flags.refused_flags import REFUSED_FLAGS
from tgi.server.flags.responses_flags import RESPONSES_FLAGS
from tgi.server.flags.serving_flags import SERVING_FLAGS
from tgi.server.flags.several_models_flags import SEVERAL_MODELS_FLAGS
from tgi.server.flags.sharding_flags import SHARDING_FLAGS
from tgi.server.flags.spec import Flag
from tgi.server.flags.template_flags import TEMPLATE_FLAGS

FLAGS: tuple[Flag, ...] = (
    *MODEL_FLAGS,
    *SEVERAL_MODELS_FLAGS,
    *SHARDING_FLAGS,
    *SERVING_FLAGS,
    *TEMPLATE_FLAGS,
    *RESPONSES_FLAGS,
    *OPERATOR_FLAGS,
    *REFUSED_FLAGS,
)

#: (variable, why this server does not act on it)
UNSERVED_VARIABLES = (
    (
        "PREFILL_CHUNKING",
        "chunked prefill on or off in TGI's python server; here the backend's runner decides",
    ),
)


def _check_unique(flags: tuple[Flag, ...]) -> None:
    """Two entries with one name, variable or destination attribute would shadow each other."""
    for what, values in (
        ("name", [n for f in flags for n in f.names]),
        ("variable", [v for f in flags for v in f.env]),
        ("dest", [f.dest for f in flags]),
    ):
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            raise AssertionError(f"the flag table repeats the {what} {', '.join(repeated)}")


_check_unique(FLAGS)
