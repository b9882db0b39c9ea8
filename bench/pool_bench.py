"""Pooling on VTA (ISA extensions acc_8bit and alu_mul): ResNet-18 (224x224, batch 1; 64x64 with ``--quick``) on
fsim with the default config ``+ext``, its residual adds fused (``residual="vta"``), packed twice from the same
quantized module: ``pool="cpu"`` (the stem's max pool and the global average pool on the host, as on a config
without the extensions) and ``pool="vta"``. Side by side in one run: the host operators (number of ops in the
placement, host time per inference from ``graph.profile``'s host operators, the least disturbed of several
inferences), the runtime's host work inside the VTA kernel calls, that both equal the CPU int8 run, and the cost
model's and the board host's estimates of each pool (the placement note). With ``--tsim``, the VTA part's cycles
of both.
"""

from __future__ import annotations

from .residual_bench import measure_placements


def run(quick: bool = False, tsim: bool = False) -> dict:
    def rows(pl, prof):
        return {"vta_pools": [f"{r['op']}: {r['note']}" for r in pl.vta_rows if "pool" in r["op"]],
                "slowest_host_ops": [(h.name, h.seconds) for h in sorted(prof.host_ops, key=lambda h: -h.seconds)[:4]]}
    out = measure_placements(quick, tsim, {w: {"residual": "vta", "pool": w} for w in ("cpu", "vta")}, rows)
    cpu, on_vta = out["cpu"], out["vta"]
    out["host_s_ratio"] = on_vta["host_s"] / cpu["host_s"] if cpu["host_s"] else 0.0
    print(f"{out['network']} on fsim, {out['config']}, residual adds fused:")
    for where, label in (("cpu", "pools on the host"), ("vta", "pools on VTA")):
        r = out[where]
        print(f"  {label:18s} {r['host_ops']:3d} host ops in the placement ({r['host_op_calls']} host calls), "
              f"host operators {1e3 * r['host_s']:7.2f} ms per inference, the runtime's host work in the VTA calls "
              f"{1e3 * r['runtime_s']:6.1f} ms; exact against the CPU: {r['exact']}")
    for where in ("cpu", "vta"):
        print(f"    slowest host ops, pools on {where}: " + ", ".join(f"{n} {1e6 * t:.0f} µs"
                                                                for n, t in out[where]["slowest_host_ops"]))
    for note in on_vta["vta_pools"]:
        print(f"    {note}")
    print(f"  host time pools on VTA / on the host: {out['host_s_ratio']:.2f}")
    if "tsim_vta_cycles" in cpu and "tsim_vta_cycles" in on_vta:
        c0, c1 = cpu["tsim_vta_cycles"], on_vta["tsim_vta_cycles"]
        out["tsim_cycles_ratio"] = c1 / c0
        print(f"  tsim VTA part: {c0:,} cycles with the pools on the host, {c1:,} on VTA ({c1 / c0:.3f}x; "
              f"{(c1 - c0) / 100e3:+.2f} ms at 100 MHz); exact: {cpu['tsim_exact']}, {on_vta['tsim_exact']}")
    return out
