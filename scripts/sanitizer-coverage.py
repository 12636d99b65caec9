#!/usr/bin/env python3
"""Sanitizer coverage: which of our kernels the GPU suites launch but no sanitizer step runs under a tool.

  python3 scripts/sanitizer-coverage.py DIR

DIR/all/all.*: the kernels the one-GPU suites launch (gpu-test.sh inventory); DIR/tools/<tool>.*:
those each tool's parts launch, their selections run without the tool (gpu-test.sh coverage). Ours are the
names in dflash::kernels::cuda. A kernel function (its name without template arguments) that a tool
never runs fails the check; template instantiations a tool misses are listed but do not fail.
"""
import pathlib
import re
import sys

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
OURS = "dflash::kernels::cuda::"


def read(files):
    names = set()
    for f in files:
        names |= {line.strip() for line in f.read_text().splitlines() if OURS in line}
    return names


def function_of(name):
    """'void dflash::kernels::cuda::(anonymous namespace)::fill_kernel<float>(float*, long)' -> '...::fill_kernel'"""
    name = re.sub(r"^void ", "", name).replace("(anonymous namespace)::", "")
    return re.split(r"[<(]", name, maxsplit=1)[0]


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    root = pathlib.Path(argv[1])
    everything = read(sorted((root / "all").glob("all.*")))
    if not everything:
        print(f"sanitizer-coverage: no kernel of ours in {root}/all/all.* (run gpu-test.sh inventory)")
        return 1
    functions = {function_of(n) for n in everything}
    print(f"the GPU suites launch {len(functions)} kernel functions of ours ({len(everything)} instantiations)")
    failed = False
    for tool in TOOLS:
        files = sorted((root / "tools").glob(f"{tool}.*"))
        if not files:
            print(f"{tool}: no list in {root}/tools (run gpu-test.sh coverage)")
            failed = True
            continue
        seen = read(files)
        seen_functions = {function_of(n) for n in seen}
        missing = sorted(functions - seen_functions)
        missing_instances = sorted(n for n in everything - seen if function_of(n) in seen_functions)
        print(f"{tool}: {len(functions) - len(missing)} of {len(functions)} functions, "
              f"{len(everything & seen)} of {len(everything)} instantiations")
        for f in missing:
            print(f"  {tool} never runs {f}")
        for n in missing_instances:
            print(f"  ({tool} runs other instantiations of {n})")
        failed |= bool(missing)
    print("sanitizer-coverage: " + ("a kernel function misses a tool" if failed else "every kernel function runs under every tool"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
