"""`tgi watermark detect [--model-id ...] [--gamma G]`: read a text on standard input and print, on one line,
a JSON object with its watermark `z_score` (and the counts behind it), as `tgi.core.watermark.detect_text`
gives it with the tokenizer of the model (the default model when no `--model-id` is given). Exit 0 whatever
the score; a z-score above 4 is strong evidence of a watermark."""

from __future__ import annotations

import argparse
import json
import sys

from tgi.core.watermark import DEFAULT_GAMMA, detect_text
from tgi.server.flags.parsers import env


def _cmd_detect(args: argparse.Namespace) -> int:
    from tgi.core.loading import resolve_model
    from tgi.core.tokenization import load_tokenizer

    tokenizer = load_tokenizer(resolve_model(args.model_id, args.revision))
    text = sys.stdin.read()
    score = detect_text(text, tokenizer, args.gamma, ignore_repeated_pairs=not args.count_repeats)
    print(json.dumps(score.as_dict()))
    return 0


def add_watermark_command(sub) -> None:
    """`tgi watermark detect` under the `tgi` command's subparsers `sub`."""
    p = sub.add_parser("watermark", help="detect the watermark of requests made with `watermark: true`")
    actions = p.add_subparsers(dest="watermark_command", required=True)
    d = actions.add_parser("detect", help="print the z-score of the text on standard input (one JSON line)")
    d.add_argument(
        "--model-id",
        default=env("MODEL_ID"),
        help="the model whose tokenizer wrote the text; default: the default model [env: MODEL_ID]",
    )
    d.add_argument("--revision", default=env("REVISION"), help="model revision on the hub [env: REVISION]")
    d.add_argument(
        "--gamma",
        type=float,
        default=float(env("WATERMARK_GAMMA", default=DEFAULT_GAMMA)),
        help="the server's --watermark-gamma [env: WATERMARK_GAMMA]",
    )
    d.add_argument(
        "--count-repeats",
        action="store_true",
        help="score every (previous token, token) pair, also repeated ones (default: each distinct pair once)",
    )
    d.set_defaults(func=_cmd_detect)
