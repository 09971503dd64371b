"""``python -m dart_core.bench <benchmark>``: benchmarks that print figures (speed goals live here, not in tests)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dart_core.bench", description=__doc__)
    sub = parser.add_subparsers(dest="benchmark", required=True)
    from dart_core.bench import native

    native.add_arguments(sub.add_parser("native", help=native.__doc__.splitlines()[0], description=native.__doc__))
    args = parser.parse_args(argv)
    if args.benchmark == "native":
        return native.run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
