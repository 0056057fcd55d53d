"""`python benchmarks/prompts.py [peers|sharegpt-like] [N] [--seed S]`: print a seeded prompt set as JSON
lines (the sets live in `tgi.server.bench.prompts`)."""

import argparse
import json
import sys

from tgi.server.bench.prompts import PROMPT_SETS, build_prompts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("set", nargs="?", default="peers", choices=sorted(PROMPT_SETS))
    p.add_argument("n", nargs="?", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=None)
    args = p.parse_args(argv)
    for prompt in build_prompts(args.set, args.n, args.seed, args.max_tokens):
        print(json.dumps({"prompt": prompt.text, "max_tokens": prompt.max_tokens, "words": prompt.num_words}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
