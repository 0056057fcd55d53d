"""Re-plot a saved serving report: `python benchmarks/plot.py report.json out.png` (`tgi.server.bench.plot`)."""

import sys

from tgi.server.bench.plot import main

if __name__ == "__main__":
    sys.exit(main())
