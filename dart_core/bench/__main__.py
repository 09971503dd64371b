"""``python -m dart_core.bench <benchmark>``: benchmarks that print figures (speed goals live here, not in tests)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dart_core.bench", description=__doc__)
    sub = parser.add_subparsers(dest="benchmark", required=True)
    from dart_core.bench import attention, concurrency, e2e, gpu, gpu_check, in_app, long, native, soak, verify_cost
    from dart_core.options.limits import check_flags
    from dart_core.race.standings import COMMAND, command_line

    raw = {"formatter_class": argparse.RawDescriptionHelpFormatter}
    modules = {"native": (native, {}), "e2e": (e2e, raw), "verify-cost": (verify_cost, {}), "long": (long, {}),
               "concurrency": (concurrency, {}), "app": (in_app, raw), "soak": (soak, {}), "gpu": (gpu, raw),
               "gpu-check": (gpu_check, raw), "attention": (attention, {})}
    parsers = {}
    for name, (module, kwargs) in modules.items():
        parsers[name] = sub.add_parser(name, help=module.__doc__.splitlines()[0], description=module.__doc__,
                                       **kwargs)
        module.add_arguments(parsers[name])
    args = parser.parse_args(argv)
    refused = check_flags(parsers[args.benchmark], args)  # before any model loads
    if refused is not None:
        return refused
    args.command = command_line(sys.argv[1:] if argv is None else argv, COMMAND[:-1])  # the run's record
    return int(modules[args.benchmark][0].run(args))


if __name__ == "__main__":
    sys.exit(main())
