"""AXI signatures: the internal DMA client ports, the AXI4 master and the AXI4-Lite slave.

Inside the core every DMA client talks to the arbiter through a *read client* (an AR stream of
address + burst length and an R stream of data) or a *write client* (AW, W, B). The arbiter adds
the AXI ID, size, burst type, cache and protection bits and drives one AXI4 master.
The top-level ports are flat and use the usual AXI names (``m_axi_araddr``, ``s_axi_wdata``, ...).
"""

from __future__ import annotations

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

ADDR_BITS = 32
LEN_BITS = 8
MAX_BURST_BEATS = 1 << LEN_BITS
#: AXI forbids a burst from crossing a 4 KiB boundary.
BOUNDARY_BYTES = 4096
ID_BITS = 3
LITE_ADDR_BITS = 12
LITE_DATA_BITS = 32

RESP_OKAY = 0
BURST_INCR = 1


def addr_req_layout() -> data.StructLayout:
    return data.StructLayout({"addr": ADDR_BITS, "len": LEN_BITS})


def read_data_layout(data_bits: int) -> data.StructLayout:
    return data.StructLayout({"data": data_bits, "last": 1, "resp": 2})


def write_data_layout(data_bits: int) -> data.StructLayout:
    return data.StructLayout({"data": data_bits, "strb": data_bits // 8, "last": 1})


class ReadClientSignature(wiring.Signature):
    """A DMA read client, from the client's side: it drives ``ar`` and receives ``r``."""

    def __init__(self, data_bits: int):
        self.data_bits = data_bits
        super().__init__({
            "ar": Out(stream.Signature(addr_req_layout())),
            "r": In(stream.Signature(read_data_layout(data_bits))),
        })


class WriteClientSignature(wiring.Signature):
    """A DMA write client, from the client's side."""

    def __init__(self, data_bits: int):
        self.data_bits = data_bits
        super().__init__({
            "aw": Out(stream.Signature(addr_req_layout())),
            "w": Out(stream.Signature(write_data_layout(data_bits))),
            "b": In(stream.Signature(2)),  # payload: BRESP
        })


def axi4_master_members(prefix: str, data_bits: int) -> dict[str, wiring.Member]:
    """Flat AXI4 master ports (``<prefix>_awaddr`` ...)."""
    p = prefix
    m = {}
    for ch in ("aw", "ar"):
        m.update({
            f"{p}_{ch}id": Out(ID_BITS), f"{p}_{ch}addr": Out(ADDR_BITS), f"{p}_{ch}len": Out(LEN_BITS),
            f"{p}_{ch}size": Out(3), f"{p}_{ch}burst": Out(2), f"{p}_{ch}lock": Out(1),
            f"{p}_{ch}cache": Out(4), f"{p}_{ch}prot": Out(3), f"{p}_{ch}qos": Out(4),
            f"{p}_{ch}valid": Out(1), f"{p}_{ch}ready": In(1),
        })
    m.update({
        f"{p}_wdata": Out(data_bits), f"{p}_wstrb": Out(data_bits // 8), f"{p}_wlast": Out(1),
        f"{p}_wvalid": Out(1), f"{p}_wready": In(1),
        f"{p}_bid": In(ID_BITS), f"{p}_bresp": In(2), f"{p}_bvalid": In(1), f"{p}_bready": Out(1),
        f"{p}_rid": In(ID_BITS), f"{p}_rdata": In(data_bits), f"{p}_rresp": In(2), f"{p}_rlast": In(1),
        f"{p}_rvalid": In(1), f"{p}_rready": Out(1),
    })
    return m


def axi4_lite_slave_members(prefix: str) -> dict[str, wiring.Member]:
    """Flat AXI4-Lite slave ports (``<prefix>_awaddr`` ...)."""
    p = prefix
    return {
        f"{p}_awaddr": In(LITE_ADDR_BITS), f"{p}_awprot": In(3), f"{p}_awvalid": In(1), f"{p}_awready": Out(1),
        f"{p}_wdata": In(LITE_DATA_BITS), f"{p}_wstrb": In(LITE_DATA_BITS // 8), f"{p}_wvalid": In(1),
        f"{p}_wready": Out(1),
        f"{p}_bresp": Out(2), f"{p}_bvalid": Out(1), f"{p}_bready": In(1),
        f"{p}_araddr": In(LITE_ADDR_BITS), f"{p}_arprot": In(3), f"{p}_arvalid": In(1), f"{p}_arready": Out(1),
        f"{p}_rdata": Out(LITE_DATA_BITS), f"{p}_rresp": Out(2), f"{p}_rvalid": Out(1), f"{p}_rready": In(1),
    }


class MasterSignature(wiring.Signature):
    """AXI4 master port as a nested signature (member names without prefix: ``awaddr`` ...)."""

    def __init__(self, data_bits: int):
        self.data_bits = data_bits
        members = {k.split("_", 1)[1]: v for k, v in axi4_master_members("x", data_bits).items()}
        super().__init__(members)


class LiteSignature(wiring.Signature):
    """AXI4-Lite slave port as a nested signature (used by the register file)."""

    def __init__(self):
        members = {k.split("_", 1)[1]: v for k, v in axi4_lite_slave_members("x").items()}
        super().__init__(members)
