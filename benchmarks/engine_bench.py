"""`python benchmarks/engine_bench.py ...`: the same as `tgi benchmark engine ...` (the code lives in `tgi.server.bench.engine`)."""

import sys

from tgi.server.bench.engine import main

if __name__ == "__main__":
    sys.exit(main())
