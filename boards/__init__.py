"""Board support: Pynq-Z1/Z2 and Ultra96 platforms, Zynq tops, the bitstream flow, the on-board driver.

``nox -s bitstream -- --board pynq-z1|pynq-z2|ultra96`` builds a plan (``python -m boards.flow``);
``boards.driver.BoardDevice`` runs instruction streams on a programmed board.
"""
