"""`python -m tgi.server.flags --markdown` prints the README's compatibility table of the launcher flags;
`--update README.md` writes it into that file, between its markers."""

from __future__ import annotations

import argparse
import sys

from tgi.server.flags.markdown import compatibility_markdown, replace_block


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tgi.server.flags", description=__doc__)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--markdown", action="store_true", help="print the table")
    what.add_argument(
        "--update", metavar="README", help="write the table into this file, between its markers"
    )
    args = parser.parse_args(argv)
    block = compatibility_markdown()
    if args.markdown:
        print(block)
        return 0
    with open(args.update, encoding="utf-8") as f:
        text = f.read()
    with open(args.update, "w", encoding="utf-8") as f:
        f.write(replace_block(text, block))
    return 0


if __name__ == "__main__":
    sys.exit(main())
