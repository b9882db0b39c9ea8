"""Executables: ``python -m vta_compiler.exec.rpc_server``."""
