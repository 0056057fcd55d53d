"""`python benchmarks/serving.py ...`: the same as `tgi benchmark serving ...` (the code lives in `tgi.server.bench.serving`)."""

import sys

from tgi.server.bench.serving import main

if __name__ == "__main__":
    sys.exit(main())
