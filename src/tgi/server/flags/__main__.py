"""`python -m tgi.server.flags --markdown` prints the compatibility table of TGI's launcher flags,
`--reference` the reference of every flag; `--update docs/reference/flags.md` writes both into that page,
between their markers."""

from __future__ import annotations

import argparse
import sys

from tgi.server.flags.markdown import PAGE, compatibility_markdown, reference_markdown, update_page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tgi.server.flags", description=__doc__)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--markdown", action="store_true", help="print the compatibility table")
    what.add_argument("--reference", action="store_true", help="print the reference of every flag")
    what.add_argument(
        "--update", metavar="PAGE", help=f"write both into this file ({PAGE}), between their markers"
    )
    args = parser.parse_args(argv)
    if args.markdown or args.reference:
        print(compatibility_markdown() if args.markdown else reference_markdown())
        return 0
    with open(args.update, encoding="utf-8") as f:
        text = f.read()
    with open(args.update, "w", encoding="utf-8") as f:
        f.write(update_page(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
