"""Sphinx helpers of the VTA docs: tables generated from ``vta_hw.spec``, the tutorial order, the gallery reset.

Directives (each renders a table from the spec, so the pages cannot drift from the code):

* ``.. vta-config-keys::`` the keys of ``vta_config.json`` with their defaults and limits;
* ``.. vta-derived::`` the derived numbers of a configuration (option ``:config:`` takes JSON changes
  to the default, e.g. ``{"LOG_BATCH": 1, "LOG_BLOCK": 3}``);
* ``.. vta-targets::`` the per-target FPGA facts;
* ``.. vta-isa-format:: memory|GEMM|ALU|uop`` the bit table of one format, with its idle bits
  (``:config:`` as above), and a drawing of its 64-bit words;
* ``.. vta-isa-enums::`` opcodes, memory types, ALU opcodes, dependency queues;
* ``.. vta-regmap::`` the host register map; ``.. vta-error-codes::`` the ERROR register's codes;
* ``.. vta-counters::`` the device and performance counters;
* ``.. vta-source:: vta_compiler/top/batch_matmul.py`` a file of the repository as a code block (options as
  ``literalinclude``'s: ``:pyobject:``, ``:start-at:``, ...), for pages that show real code (the sources are
  copied before the build, so ``literalinclude``'s relative paths cannot reach the repository).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

# ---------------------------------------------------------------------------------------------
# Tutorial order (sphinx-gallery): the reading order of the original VTA tutorials.

SUBSECTIONS = ["get_started", "optimize", "frontend", "autotvm", "hardware"]
TUTORIALS = [
    "vta_get_started.py",
    "matrix_multiply.py", "matrix_multiply_opt.py", "convolution_opt.py",
    "deploy_classification.py", "deploy_detection.py", "deploy_other_networks.py", "deploy_ppocr.py",
    "tune_conv2d.py", "tune_network.py",
    "config_to_bitstream.py",
]


def subsection_key(path: str) -> int:
    name = Path(str(path)).name
    return SUBSECTIONS.index(name) if name in SUBSECTIONS else len(SUBSECTIONS)


class TutorialOrder:
    def __init__(self, src_dir: str):
        self.src_dir = src_dir

    def __call__(self, filename: str) -> tuple[int, str]:
        name = Path(str(filename)).name
        return (TUTORIALS.index(name) if name in TUTORIALS else len(TUTORIALS), name)

    def __repr__(self) -> str:        # sphinx-gallery compares configurations by repr
        return "<TutorialOrder>"


def reset_vta(gallery_conf, fname) -> None:
    """Between tutorials: drop the runtime's command queue and the current Environment, so that each
    tutorial starts from the default configuration on a fresh device."""
    import sys
    if "vta_runtime" in sys.modules:
        sys.modules["vta_runtime"].set_command_queue(None)
    if "vta_compiler.environment" in sys.modules:
        env = sys.modules["vta_compiler.environment"].Environment
        env.current = None
        env._stack.clear()


# ---------------------------------------------------------------------------------------------
# Tables from vta_hw.spec


def _config(text: str | None):
    from vta_hw.spec import load_config
    base = load_config()
    if not text:
        return base
    return base.replace(**json.loads(text))


def _table(rows: list[list[str]], header: list[str], widths: list[int] | None = None, title: str = "") -> str:
    lines = [f".. list-table:: {title}".rstrip(), "   :header-rows: 1"]
    if widths:
        lines.append("   :widths: " + " ".join(str(w) for w in widths))
    lines.append("")
    for row in [header, *rows]:
        for k, cell in enumerate(row):
            cell = str(cell).replace("\n", " ") or " "
            lines.append(("   * - " if k == 0 else "     - ") + cell)
    return "\n".join(lines) + "\n"


class _SpecDirective(SphinxDirective):
    has_content = False
    optional_arguments = 1
    option_spec = {"config": directives.unchanged}

    def text(self) -> str:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        return self.parse_text_to_nodes(self.text())


class ConfigKeys(_SpecDirective):
    def text(self) -> str:
        from vta_hw.spec import KEYS, TARGETS, load_config
        from vta_hw.spec import config as spec_config
        d = load_config().cfg_dict
        rows = [["``TARGET``", f"``{d['TARGET']}``", ", ".join(f"``{t}``" for t in TARGETS),
                 "the back end: fsim, tsim or a board; it fixes the board facts below"],
                ["``HW_VER``", f"``{d['HW_VER']}``", f"``{d['HW_VER']}``", "the ISA version (spec 1.1)"]]
        for key in KEYS[2:]:
            lo, hi, why = spec_config._INT_KEYS[key]
            rows.append([f"``{key}``", f"{d[key]}", f"{lo}" if lo == hi else f"{lo} .. {hi}", why])
        from vta_hw.spec import EXTENSIONS
        rows.append(["``ISA_EXTENSIONS``", "(absent)", "a list of " + ", ".join(f"``{n}``" for n in EXTENSIONS),
                     "optional: the opt-in ISA extensions (see the ISA page); without the key, or with an empty "
                     "list, the config is exactly HW_VER 0.0.2"])
        return _table(rows, ["key", "default", "allowed", "why"], [22, 8, 18, 52])


DERIVED = [
    ("BATCH", "rows of the GEMM core's input (``2**LOG_BATCH``)"),
    ("BLOCK_IN", "columns of an input element, rows of a weight block"),
    ("BLOCK_OUT", "output channels per GEMM"),
    ("INP_WIDTH", "bits per input value"), ("WGT_WIDTH", "bits per weight"),
    ("ACC_WIDTH", "bits per accumulator"), ("OUT_WIDTH", "bits per output value"),
    ("INP_ELEM_BYTES", "bytes of one INP element (BATCH x BLOCK_IN values)"),
    ("WGT_ELEM_BYTES", "bytes of one WGT element (BLOCK_OUT x BLOCK_IN values)"),
    ("ACC_ELEM_BYTES", "bytes of one ACC element (BATCH x BLOCK_OUT values)"),
    ("OUT_ELEM_BYTES", "bytes of one OUT element"), ("UOP_ELEM_BYTES", "bytes of one micro-op"),
    ("INP_BUFF_DEPTH", "INP SRAM elements"), ("WGT_BUFF_DEPTH", "WGT SRAM elements"),
    ("ACC_BUFF_DEPTH", "ACC SRAM elements (and OUT's)"), ("UOP_BUFF_DEPTH", "UOP SRAM entries"),
    ("LOG_INP_BUFF_DEPTH", "index bits of INP (LID)"), ("LOG_WGT_BUFF_DEPTH", "index bits of WGT (LWD)"),
    ("LOG_ACC_BUFF_DEPTH", "index bits of ACC (LAD)"), ("LOG_UOP_BUFF_DEPTH", "index bits of UOP (LUD)"),
    ("AXI_DATA_BITS", "width of the core's memory bus (the TARGET's port width x AXI_PORTS)"),
    ("AXI_MAX_BURST_BEATS", "longest burst the target's memory port takes"),
    ("fpga_device", "FPGA part"), ("fpga_freq", "clock in MHz"),
    ("BITSTREAM", "bitstream name (spec 1.3)"), ("MODEL", "TARGET + bitstream name: the compiler's target model"),
]


class Derived(_SpecDirective):
    def text(self) -> str:
        cfg = _config(self.options.get("config"))
        rows = [[f"``{name}``", f"``{getattr(cfg, name)}``", what] for name, what in DERIVED]
        title = f"Derived from {cfg.MODEL}"
        return _table(rows, ["name", "value", "meaning"], [26, 30, 44], title)


class Targets(_SpecDirective):
    def text(self) -> str:
        from vta_hw.spec import TARGETS
        names = list(TARGETS)
        keys = ["fpga_device", "fpga_family", "fpga_freq", "fpga_log_axi_bus_width", "fpga_axi_max_burst",
                "fetch_base_addr"]
        rows = []
        for k in keys:
            vals = []
            for t in names:
                v = TARGETS[t][k]
                vals.append(f"``0x{v:08X}``" if k.endswith("addr") else f"``{v}``")
            rows.append([f"``{k}``", *vals])
        return _table(rows, ["fact", *[f"``{t}``" for t in names]])


def _format(cfg, name: str):
    fmts = {"memory": cfg.isa.mem, "GEMM": cfg.isa.gemm, "ALU": cfg.isa.alu, "uop": cfg.isa.uop,
            "FINISH": cfg.isa.finish}
    if name not in fmts:
        raise ValueError(f"vta-isa-format: unknown format {name!r}; one of {sorted(fmts)}")
    return fmts[name]


FIELD_MEANING = {
    "opcode": "LOAD 0, STORE 1, GEMM 2, FINISH 3, ALU 4",
    "pop_prev_dep": "wait for a token from the previous stage", "pop_next_dep": "wait for a token from the next stage",
    "push_prev_dep": "signal the previous stage when done", "push_next_dep": "signal the next stage when done",
    "memory_type": "UOP 0, WGT 1, INP 2, ACC 3, OUT 4, ACC_8BIT 5 (extension ``acc_8bit``)",
    "sram_base": "first SRAM element", "dram_base": "first DRAM element (in elements of the memory type)",
    "y_size": "rows", "x_size": "elements per row", "x_stride": "elements between row starts in DRAM",
    "y_pad_0": "zero rows before", "y_pad_1": "zero rows after",
    "x_pad_0": "zero elements before each row", "x_pad_1": "zero elements after each row",
    "reset_reg": "GEMM: zero the accumulators instead of accumulating",
    "uop_bgn": "first micro-op", "uop_end": "one past the last micro-op",
    "iter_out": "outer loop count", "iter_in": "inner loop count",
    "dst_factor_out": "ACC index step per outer iteration", "dst_factor_in": "ACC index step per inner iteration",
    "src_factor_out": "source index step per outer iteration", "src_factor_in": "source index step per inner iteration",
    "wgt_factor_out": "WGT index step per outer iteration", "wgt_factor_in": "WGT index step per inner iteration",
    "alu_opcode": "MIN 0, MAX 1, ADD 2, SHR 3, MUL 4 (extension ``alu_mul``)",
    "use_imm": "1: the operand is ``imm``",
    "imm": "signed immediate operand",
    "dst_idx": "ACC index (GEMM and ALU destination)", "src_idx": "INP index (GEMM) or ACC index (ALU source)",
    "wgt_idx": "WGT index (GEMM)",
}

_COLOURS = ["#dbeafe", "#fde68a", "#bbf7d0", "#fecaca", "#e9d5ff", "#fed7aa", "#a5f3fc", "#f5d0fe"]


def _bit_drawing(fmt) -> str:
    """An HTML strip per 64-bit word (MSB on the left) with one cell per field, as wide as its bits."""
    word_bits = 64 if fmt.total_bits > 32 else 32
    out = ['<div class="vta-bits">']
    for w in range(fmt.total_bits // word_bits):
        lo, hi = w * word_bits, (w + 1) * word_bits - 1
        cells, pos = [], hi
        fields = sorted((f for f in fmt.fields if lo <= f.lsb <= hi), key=lambda f: -f.lsb)
        for k, f in enumerate(fields):
            if f.msb < pos:
                cells.append((pos - f.msb, "0", "idle: zero", "#f3f4f6"))
            cells.append((f.width, f.name, f"{f.name} [{f.msb}:{f.lsb}]", _COLOURS[k % len(_COLOURS)]))
            pos = f.lsb - 1
        if pos >= lo:
            cells.append((pos - lo + 1, "0", "idle: zero", "#f3f4f6"))
        out.append(f'<div class="vta-word"><span class="vta-word-label">bits {hi}..{lo}</span><div class="vta-row">')
        for width, label, title, colour in cells:
            out.append(f'<span class="vta-field" style="flex:{width};background:{colour}" '
                       f'title="{html.escape(title)}"><span>{html.escape(label)}</span>'
                       f'<small>{width}</small></span>')
        out.append("</div></div>")
    out.append("</div>")
    return "".join(out)


class IsaFormat(SphinxDirective):
    required_arguments = 1
    option_spec = {"config": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        cfg = _config(self.options.get("config"))
        fmt = _format(cfg, self.arguments[0])
        rows = []
        for f in fmt.fields:
            bits = f"{f.msb}:{f.lsb}" if f.width > 1 else f"{f.lsb}"
            rows.append([f"``{f.name}``", bits, f.width, "signed" if f.signed else "", FIELD_MEANING.get(f.name, "")])
        idle = ", ".join(f"{a}:{b}" if b > a else f"{a}" for a, b in reversed(fmt.idle_ranges())) or "none"
        title = f"{fmt.name} format ({fmt.total_bits} bits, {cfg.BITSTREAM}); idle bits (zero): {idle}"
        table = self.parse_text_to_nodes(_table(rows, ["field", "bits", "width", "", "meaning"],
                                                [18, 10, 8, 8, 56], title))
        return [nodes.raw("", _bit_drawing(fmt), format="html"), *table]


class IsaEnums(_SpecDirective):
    def text(self) -> str:
        from vta_hw.spec import TOKEN_QUEUES, AluOp, MemType, Opcode, Stage, extension_for
        from vta_hw.spec.isa import QUEUE_ENDS

        def needs(ext):
            return f"ISA extension ``{ext.name}`` only (refused without it)" if ext else ""
        out = [_table([[f"``{o.name}``", int(o)] for o in Opcode], ["opcode", "value"], title="Opcodes"),
               _table([[f"``{m.name}``", int(m), needs(extension_for(mem_type=m)) or
                        ("stores only" if m == MemType.OUT else "")]
                       for m in MemType], ["memory type", "value", ""], title="Memory types"),
               _table([[f"``{a.name}``", int(a), needs(extension_for(alu_op=a))]
                       for a in AluOp], ["ALU opcode", "value", ""], title="ALU opcodes"),
               _table([[f"``{s.name}``", int(s)] for s in Stage], ["stage", "queue id"], title="Stages"),
               _table([[f"``{q}``", QUEUE_ENDS[q][0].name, QUEUE_ENDS[q][1].name] for q in TOKEN_QUEUES],
                      ["token queue", "from", "to"], title="Dependency-token queues")]
        return "\n".join(out)


class IsaExtensions(_SpecDirective):
    def text(self) -> str:
        from vta_hw.spec import EXTENSIONS
        rows = [[f"``{e.name}``", e.summary, f"``_{e.tag}``", e.bit, e.semantics] for e in EXTENSIONS.values()]
        return _table(rows, ["extension", "adds", "MODEL / BITSTREAM tag", "EXTENSIONS bit", "semantics"],
                      [11, 17, 10, 8, 54], title="ISA extensions (config key ISA_EXTENSIONS)")


class Regmap(_SpecDirective):
    def text(self) -> str:
        from vta_hw.spec import regmap
        rows = [[f"``0x{r.offset:03X}``", f"``{r.name}``", r.access, r.doc] for r in regmap.REGISTERS]
        return _table(rows, ["offset", "register", "access", "meaning"], [12, 28, 8, 52])


class ErrorCodes(_SpecDirective):
    def text(self) -> str:
        from vta_hw.spec import regmap
        rows = [[int(e), f"``{e.name}``"] for e in regmap.ErrorCode]
        return _table(rows, ["code", "name"], [15, 85])


class Counters(_SpecDirective):
    def text(self) -> str:
        from vta_hw.spec import DEVICE_COUNTERS, PERF_COUNTERS
        rows = [[f"``{c}``", "every device (fsim, tsim, boards)"] for c in DEVICE_COUNTERS]
        rows += [[f"``{c}``", "tsim and boards (register map)"] for c in PERF_COUNTERS]
        return _table(rows, ["counter", "reported by"], [40, 60])


class RepoSource(SphinxDirective):
    required_arguments = 1
    option_spec = {"pyobject": directives.unchanged, "start-at": directives.unchanged,
                   "end-before": directives.unchanged, "language": directives.unchanged}

    def run(self):
        from sphinx.directives.code import LiteralIncludeReader
        repo = Path(self.config.vta_docs_repo)
        path = (repo / self.arguments[0]).resolve()
        if repo not in path.parents or not path.is_file():
            raise self.error(f"vta-source: {self.arguments[0]} is not a file of the repository {repo}")
        opts = {k: v for k, v in self.options.items() if k != "language"}
        text, _ = LiteralIncludeReader(str(path), opts, self.config).read(location=self.get_location())
        self.env.note_dependency(str(path))
        block = nodes.literal_block(text, text)
        block["language"] = self.options.get("language", "python")
        return [block]


def setup(app):
    app.add_config_value("vta_docs_repo", str(Path(__file__).resolve().parents[2]), "env")
    app.add_directive("vta-source", RepoSource)
    for name, cls in (("vta-config-keys", ConfigKeys), ("vta-derived", Derived), ("vta-targets", Targets),
                      ("vta-isa-format", IsaFormat), ("vta-isa-enums", IsaEnums),
                      ("vta-isa-extensions", IsaExtensions), ("vta-regmap", Regmap),
                      ("vta-error-codes", ErrorCodes), ("vta-counters", Counters)):
        app.add_directive(name, cls)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
