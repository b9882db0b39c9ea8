"""A device-tree overlay (a flattened device tree blob, ``.dtbo``) that has Linux's FPGA manager
program the base FPGA region with a bitstream from ``/lib/firmware``.

It is what ``dtc -@`` makes of::

    /dts-v1/; /plugin/;
    / {
        fragment@0 {
            target = <&base_fpga_region>;
            __overlay__ {
                firmware-name = "<bitstream>";
                fpga-bridges = <&fpga_bridge0 &fpga_bridge2>;   /* bridges to hold off while programming */
            };
        };
    };

with the label references left to the kernel (``__fixups__``), so it applies to any base device
tree built with symbols (the socfpga kernels' are). Written here so that the board needs no dtc.
"""

from __future__ import annotations

import struct

FDT_MAGIC = 0xD00DFEED
FDT_BEGIN_NODE, FDT_END_NODE, FDT_PROP, FDT_END = 1, 2, 3, 9
FDT_VERSION, FDT_LAST_COMP_VERSION = 17, 16
UNRESOLVED_PHANDLE = 0xFFFFFFFF
BASE_REGION = "base_fpga_region"


def _pad4(b: bytes) -> bytes:
    return b + bytes(-len(b) % 4)


class _Blob:
    def __init__(self):
        self.struct = bytearray()
        self.strings = bytearray()
        self._offsets: dict[str, int] = {}

    def begin(self, name: str) -> None:
        self.struct += struct.pack(">I", FDT_BEGIN_NODE) + _pad4(name.encode() + b"\0")

    def end(self) -> None:
        self.struct += struct.pack(">I", FDT_END_NODE)

    def prop(self, name: str, value: bytes) -> None:
        if name not in self._offsets:
            self._offsets[name] = len(self.strings)
            self.strings += name.encode() + b"\0"
        self.struct += struct.pack(">III", FDT_PROP, len(value), self._offsets[name]) + _pad4(value)

    def finish(self) -> bytes:
        self.struct += struct.pack(">I", FDT_END)
        header_bytes, rsvmap = 40, bytes(16)          # an empty memory reservation map
        off_struct = header_bytes + len(rsvmap)
        off_strings = off_struct + len(self.struct)
        total = off_strings + len(self.strings)
        header = struct.pack(">10I", FDT_MAGIC, total, off_struct, off_strings, header_bytes, FDT_VERSION,
                             FDT_LAST_COMP_VERSION, 0, len(self.strings), len(self.struct))
        return header + rsvmap + bytes(self.struct) + bytes(self.strings)


def _strings(*values: str) -> bytes:
    return b"".join(v.encode() + b"\0" for v in values)


def fpga_region_overlay(firmware_name: str, bridges: tuple[str, ...] = ()) -> bytes:
    """The overlay blob: program ``firmware_name`` into the base FPGA region, with ``bridges``
    (labels of the base tree) disabled while programming and enabled after."""
    if not firmware_name or "/" in firmware_name or "\0" in firmware_name:
        raise ValueError(f"firmware name {firmware_name!r} must be a plain file name in /lib/firmware")
    b = _Blob()
    b.begin("")
    b.begin("fragment@0")
    b.prop("target", struct.pack(">I", UNRESOLVED_PHANDLE))
    b.begin("__overlay__")
    b.prop("firmware-name", _strings(firmware_name))
    if bridges:
        b.prop("fpga-bridges", struct.pack(f">{len(bridges)}I", *[UNRESOLVED_PHANDLE] * len(bridges)))
    b.end()
    b.end()
    b.begin("__fixups__")
    b.prop(BASE_REGION, _strings("/fragment@0:target:0"))
    for k, label in enumerate(bridges):
        b.prop(label, _strings(f"/fragment@0/__overlay__:fpga-bridges:{4 * k}"))
    b.end()
    b.end()
    return b.finish()
