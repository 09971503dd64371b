"""``python -m dart_core.bench <benchmark>``: benchmarks that print figures (speed goals live here, not in tests)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dart_core.bench", description=__doc__)
    sub = parser.add_subparsers(dest="benchmark", required=True)
    from dart_core.bench import attention, concurrency, e2e, gpu, gpu_check, in_app, long, native, soak, verify_cost
    from dart_core.race.standings import COMMAND, command_line

    native.add_arguments(sub.add_parser("native", help=native.__doc__.splitlines()[0], description=native.__doc__))
    e2e.add_arguments(sub.add_parser("e2e", help=e2e.__doc__.splitlines()[0], description=e2e.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter))
    verify_cost.add_arguments(sub.add_parser("verify-cost", help=verify_cost.__doc__.splitlines()[0],
                                             description=verify_cost.__doc__))
    long.add_arguments(sub.add_parser("long", help=long.__doc__.splitlines()[0], description=long.__doc__))
    concurrency.add_arguments(sub.add_parser("concurrency", help=concurrency.__doc__.splitlines()[0],
                                             description=concurrency.__doc__))
    in_app.add_arguments(sub.add_parser("app", help=in_app.__doc__.splitlines()[0], description=in_app.__doc__,
                                        formatter_class=argparse.RawDescriptionHelpFormatter))
    soak.add_arguments(sub.add_parser("soak", help=soak.__doc__.splitlines()[0], description=soak.__doc__))
    gpu.add_arguments(sub.add_parser("gpu", help=gpu.__doc__.splitlines()[0], description=gpu.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter))
    gpu_check.add_arguments(sub.add_parser("gpu-check", help=gpu_check.__doc__.splitlines()[0],
                                           description=gpu_check.__doc__,
                                           formatter_class=argparse.RawDescriptionHelpFormatter))
    attention.add_arguments(sub.add_parser("attention", help=attention.__doc__.splitlines()[0],
                                           description=attention.__doc__))
    args = parser.parse_args(argv)
    args.command = command_line(sys.argv[1:] if argv is None else argv, COMMAND[:-1])  # the run's record
    if args.benchmark == "native":
        return native.run(args)
    if args.benchmark == "e2e":
        return e2e.run(args)
    if args.benchmark == "verify-cost":
        return verify_cost.run(args)
    if args.benchmark == "long":
        return long.run(args)
    if args.benchmark == "concurrency":
        return concurrency.run(args)
    if args.benchmark == "app":
        return in_app.run(args)
    if args.benchmark == "soak":
        return soak.run(args)
    if args.benchmark == "gpu":
        return gpu.run(args)
    if args.benchmark == "gpu-check":
        return gpu_check.run(args)
    if args.benchmark == "attention":
        return attention.run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
