"""VTA hardware: the ISA/config contract (``vta_hw.spec``) and the Amaranth core.

This package's ``__init__`` stays import-light so that ``vta_hw.spec`` never pulls in amaranth.
"""
