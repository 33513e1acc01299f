"""The command `make dashboards` runs: `python -m autoscaler.observability.dashboards DIRECTORY`
writes the generated files into DIRECTORY."""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from autoscaler.observability.dashboards.generated import write


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m autoscaler.observability.dashboards",
        description="write the Grafana dashboards and their ConfigMaps into a directory",
    )
    parser.add_argument("directory", type=Path, help="e.g. deploy/grafana")
    args = parser.parse_args(argv)
    for path in write(args.directory):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
