"""Benchmarks behind ``nox -s bench``; every figure is measured in the same run, results in build/bench/."""
