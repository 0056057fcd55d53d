"""The table's refused flags: TGI's launcher flags this server does not serve. Each is taken (so that a TGI
command line parses) and stops the start, naming the flag and why, when it is given a value that asks for
something; the value that asks for nothing passes."""

from __future__ import annotations

from collections.abc import Callable

from tgi.server.flags.spec import LAUNCHER, Flag, Kind, Refusal

REFUSED = "TGI's flags refused here"
SCHEDULING = "the scheduler admits waiting requests at every step, as far as the token budget allows (TGI's "
NGROK = "ngrok tunnelling is not supported"


def refused(
    name: str,
    why: str,
    example: str,
    parse: Callable[[str], object] | None = None,
    neutral: object = None,
    kind: Kind = "value",
) -> Flag:
    """A TGI flag refused with `why`, read from its TGI variable (the name in capitals)."""
    var = name[2:].upper().replace("-", "_")
    return Flag(
        (name,),
        f"refused: {why}",
        REFUSED,
        LAUNCHER,
        env=(var,),
        parse=parse,
        default=False if kind == "switch" else None,
        kind=kind,
        metavar=None if kind == "switch" else var,
        refusal=Refusal(why, neutral),
        example=example,
    )


REFUSED_FLAGS = (
    refused("--waiting-served-ratio", SCHEDULING + "behaviour with ratio 0)", "1.2", float, 0.0),
    refused("--max-waiting-tokens", SCHEDULING + "behaviour with 0)", "20", int, 0),
    refused("--prometheus-port", "metrics are served at /metrics on --port", "9000", int),
    refused("--shard-uds-path", "the shards talk through torch.distributed, not gRPC sockets", "/tmp/tgi"),
    refused(
        "--weights-cache-override", "use --huggingface-hub-cache, or give --model-id a local folder", "/tmp/w"
    ),
    refused(
        "--disable-custom-kernels", "choose the backend's kernels with --attention", "true", kind="switch"
    ),
    refused("--ngrok", NGROK, "true", kind="switch"),
    refused("--ngrok-authtoken", NGROK, "token"),
    refused("--ngrok-edge", NGROK, "edge"),
)
