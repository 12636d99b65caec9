"""The `dflash-data` command: one subcommand per tool (`prepare`, `bench`, `track`)."""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="dflash-data", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    # Each tool module adds its own subcommand: register(sub) sets a `run` function as default.
    for module_name in ("prepare", "bench", "track"):
        module = __import__(f"dflash_data.{module_name}", fromlist=["register"])
        module.register(sub)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
