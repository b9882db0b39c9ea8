"""Verilator lint (``--lint-only -Wall``) of the core's generated Verilog: no warning beyond the
waivers of ``vta_hw/verilator_waivers.vlt``, every waiver still needed, and the waivers do not
hide real problems (a broken module still gets its warnings)."""

import re

import pytest

from vta_hw.lint import CE_WAIVERS, WAIVERS, lint_file, verilator_path, warning_classes
from vta_hw.spec import load_config
from vta_hw.verilog import generate

VL = verilator_path()
if VL is None:
    pytest.skip("Verilator is not installed", allow_module_level=True)

CONFIGS = {
    "1x16x16": {},
    "2x8x8": {"LOG_BATCH": 1, "LOG_BLOCK": 3, "LOG_WGT_BUFF_SIZE": 16},
    "ultra96": {"TARGET": "ultra96"},
}
WAIVED = set(re.findall(r"^lint_off -rule (\w+)", WAIVERS.read_text(), re.M))


@pytest.mark.parametrize("name", CONFIGS)
def test_the_core_has_no_lint_warning_beyond_the_waivers(name):
    cfg = load_config().replace(**CONFIGS[name])
    assert lint_file(generate(cfg), VL) == []


def test_every_waiver_is_needed():
    classes = warning_classes(lint_file(generate(load_config()), VL, waivers=None))
    assert set(classes) == WAIVED, f"waived but not seen: {WAIVED - set(classes)}; seen, not waived: " \
                                   f"{set(classes) - WAIVED}"


def test_the_clock_enable_form_has_no_warning_beyond_its_waivers_and_needs_them():
    """The form tsim simulates (``generate(clock_enables=True)``): clean with both waiver files; with the
    common ones only, exactly the classes its own file waives remain."""
    path = generate(load_config(), clock_enables=True)
    assert lint_file(path, VL, waivers=(WAIVERS, CE_WAIVERS)) == []
    ce_waived = set(re.findall(r"^lint_off -rule (\w+)", CE_WAIVERS.read_text(), re.M))
    assert set(warning_classes(lint_file(path, VL))) == ce_waived


def test_the_waivers_do_not_hide_real_problems(tmp_path):
    """Negative control: a module with a truncating assignment, an undriven wire and a latch."""
    bad = tmp_path / "bad.v"
    bad.write_text("module vta_core(input [7:0] a, output [3:0] y, output reg q, output z);\n"
                   "  wire u;\n"
                   "  assign y = a;\n"
                   "  assign z = u;\n"
                   "  always @* if (a[0]) q = a[1];\n"
                   "endmodule\n")
    classes = warning_classes(lint_file(bad, VL))
    assert {"WIDTHTRUNC", "UNDRIVEN", "LATCH"} <= set(classes), classes
