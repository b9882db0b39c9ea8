"""The demo behind ``nox -s demo``: real work compiled and run on the simulator, checked against numpy."""
