"""Where measured tilings reach the operators: ``conv2d_tiling``, ``dense_tiling``, ``group_conv2d_tiling``,
``conv2d_transpose_tiling`` (and through them ``graph_pack``) ask here first. The records live in
``vta_compiler.autotune`` (imported lazily: it imports the operators)."""

from __future__ import annotations


def tuned_tiling(kind: str, workload, env, acc_operands: int):
    """The best measured tiling of a workload under the active records, or None (then the cost model picks)."""
    from ..autotune import dispatch
    return dispatch.lookup(kind, workload, env, acc_operands)


def records_key() -> tuple:
    """Changes whenever the records that ``tuned_tiling`` consults change (for caches of chosen tilings)."""
    from ..autotune import dispatch
    return dispatch.context_key()
