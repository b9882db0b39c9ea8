"""nox -s bench [-- --quick]: run every benchmark section and write build/bench/results.json."""

from __future__ import annotations

import argparse
import inspect
import sys

from . import (
    activation_bench,
    compiler_bench,
    costmodel_bench,
    depthwise_bench,
    fsim_bench,
    network_bench,
    operators_bench,
    pool_bench,
    residual_bench,
    tsim_bench,
    tune_bench,
    zoo_bench,
)
from .common import write_results

SECTIONS = {"fsim": fsim_bench.run, "tsim": tsim_bench.run, "compiler": compiler_bench.run,
            "operators": operators_bench.run, "network": network_bench.run, "depthwise": depthwise_bench.run,
            "tune": tune_bench.run, "zoo": zoo_bench.run, "costmodel": costmodel_bench.run,
            "residual": residual_bench.run, "pool": pool_bench.run,
            "activation": activation_bench.run}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="smaller problems (for CI smoke runs)")
    p.add_argument("--only", choices=sorted(SECTIONS), action="append", help="run only these sections")
    p.add_argument("--tsim", action="store_true", help="also run the larger workloads on tsim (when available)")
    args = p.parse_args(argv)
    results = {}
    for name, fn in SECTIONS.items():
        if args.only and name not in args.only:
            continue
        print(f"== {name} ==")
        extra = {"tsim": args.tsim} if "tsim" in inspect.signature(fn).parameters else {}
        results[name] = fn(quick=args.quick, **extra)
    path = write_results(results)
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
