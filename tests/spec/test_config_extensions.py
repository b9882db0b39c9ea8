"""The opt-in ISA extensions (config key ISA_EXTENSIONS): validation, derived names, the register
that reports them, and that a config without the key is exactly HW_VER 0.0.2."""

import json

import pytest

from vta_compiler import bitstream as B
from vta_hw.spec import DEFAULT_CONFIG_PATH, EXTENSIONS, AluOp, Config, ConfigError, MemType, load_config
from vta_hw.spec.regmap import OFFSET, describe_extensions, extensions_word
from vta_runtime.errors import DeviceError
from vta_runtime.mmio import Mmio

DEFAULT = json.loads(DEFAULT_CONFIG_PATH.read_text())
BOTH = ["alu_mul", "acc_8bit"]


def test_without_the_key_a_config_is_unchanged():
    """The hashes that key the shipped tuning records and every build cache, and the names, of the
    default config (recorded before the extensions existed); an empty list is the same config."""
    c = load_config(DEFAULT)
    assert (c.hash(), c.hash(hardware_only=True)) == ("b3f3327b1f718482", "7735181083ea953e")
    assert load_config({**DEFAULT, "TARGET": "ultra96"}).hash() == "006b9fb47205455d"
    assert c.ISA_EXTENSIONS == () and "ISA_EXTENSIONS" not in c.cfg_dict
    assert (c.MODEL, c.BITSTREAM) == ("sim_1x16_i8w8a32_15_15_18_17", "1x16_i8w8a32_15_15_18_17")
    assert c.isa.alu_ops == {AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR}
    assert c.isa.load_types == {MemType.UOP, MemType.WGT, MemType.INP, MemType.ACC}
    empty = load_config({**DEFAULT, "ISA_EXTENSIONS": []})
    assert empty == c and empty.hash() == c.hash() and empty.cfg_dict == DEFAULT and empty.MODEL == c.MODEL


def test_extensions_are_named_everywhere_and_in_one_order():
    a = load_config({**DEFAULT, "ISA_EXTENSIONS": ["acc_8bit", "alu_mul"]})
    b = load_config(DEFAULT).replace(ISA_EXTENSIONS=BOTH)
    assert a == b and hash(a) == hash(b) and a.hash() == b.hash()
    assert a.ISA_EXTENSIONS == ("alu_mul", "acc_8bit") and a.cfg_dict["ISA_EXTENSIONS"] == BOTH
    assert a.BITSTREAM == "1x16_i8w8a32_15_15_18_17_mul_acc8" and a.MODEL == "sim_1x16_i8w8a32_15_15_18_17_mul_acc8"
    mul = load_config({**DEFAULT, "ISA_EXTENSIONS": ["alu_mul"]})
    acc8 = load_config({**DEFAULT, "ISA_EXTENSIONS": ["acc_8bit"]})
    assert (mul.BITSTREAM, acc8.BITSTREAM) == ("1x16_i8w8a32_15_15_18_17_mul", "1x16_i8w8a32_15_15_18_17_acc8")
    # every pair differs in every cache key
    keys = {(x.hash(), x.hash(hardware_only=True), x.BITSTREAM) for x in (load_config(DEFAULT), mul, acc8, a)}
    assert len({k[0] for k in keys}) == len({k[1] for k in keys}) == len({k[2] for k in keys}) == 4
    assert mul.isa.alu_ops == {*AluOp} and MemType.ACC_8BIT not in mul.isa.load_types
    assert acc8.isa.load_types == {MemType.UOP, MemType.WGT, MemType.INP, MemType.ACC, MemType.ACC_8BIT}
    assert AluOp.MUL not in acc8.isa.alu_ops
    assert "-DVTA_EXT_ALU_MUL=1" in a.defs() and "-DVTA_EXT_ACC_8BIT=1" in a.defs()
    assert not any("EXT" in d for d in load_config(DEFAULT).defs())
    # a saved config loads back the same
    assert Config(json.loads(a.to_json())) == a
    # the compiler's environment sees them too
    import vta_compiler as vta
    assert vta.Environment(a).ISA_EXTENSIONS == ("alu_mul", "acc_8bit")


@pytest.mark.parametrize("value, message", [
    ("alu_mul", "ISA_EXTENSIONS must be a list of extension names such as"),
    ([4], "ISA_EXTENSIONS must be a list of extension names such as"),
    ({"alu_mul": True}, "ISA_EXTENSIONS must be a list of extension names such as"),
    (["alu_mul", "fma"], "ISA_EXTENSIONS names an unknown extension 'fma'; the extensions are alu_mul"),
    (["MUL"], "ISA_EXTENSIONS names an unknown extension 'MUL'"),
    (["acc_8bit", "acc_8bit"], "ISA_EXTENSIONS names acc_8bit more than once"),
])
def test_refusals_name_the_key(value, message):
    with pytest.raises(ConfigError) as e:
        Config({**DEFAULT, "ISA_EXTENSIONS": value})
    assert message in str(e.value)
    assert "acc_8bit" in str(e.value) or "acc_8bit" in repr(value)   # the message lists the known ones


def test_unknown_keys_mention_the_optional_one():
    with pytest.raises(ConfigError, match="the optional ISA_EXTENSIONS"):
        Config({**DEFAULT, "ISA_EXTENSION": ["alu_mul"]})


def test_extensions_register_and_the_drivers_check():
    base, ext = load_config(DEFAULT), load_config(DEFAULT).replace(ISA_EXTENSIONS=BOTH)
    assert extensions_word(base) == 0 and extensions_word(ext) == 3
    assert extensions_word(base.replace(ISA_EXTENSIONS=["acc_8bit"])) == 1 << EXTENSIONS["acc_8bit"].bit == 2
    assert describe_extensions(3) == "alu_mul, acc_8bit" and describe_extensions(0) == "no ISA extensions"

    def core(cfg):   # the registers check_identity reads, as a core built for cfg answers them
        from vta_hw.spec.regmap import ID_VALUE, hwconfig_word
        regs = {OFFSET["ID"]: ID_VALUE, OFFSET["HWCONFIG"]: hwconfig_word(cfg),
                OFFSET["EXTENSIONS"]: extensions_word(cfg)}
        return Mmio(lambda off: regs.get(off, 0), lambda off, v: None)

    core(ext).check_identity(ext)
    core(base).check_identity(base)
    with pytest.raises(DeviceError, match="implements no ISA extensions, but the configuration .*_mul_acc8 has "
                                          "alu_mul, acc_8bit"):
        core(base).check_identity(ext)
    with pytest.raises(DeviceError, match="implements alu_mul, acc_8bit, but the configuration"):
        core(ext).check_identity(base)


def test_a_bitstream_with_an_extension_is_never_taken_for_a_config_without(tmp_path, monkeypatch):
    monkeypatch.setenv("VTA_CACHE_PATH", str(tmp_path / "cache"))
    base = load_config({**DEFAULT, "TARGET": "pynq"})
    ext = base.replace(ISA_EXTENSIONS=BOTH)
    assert B.get_bitstream_path(ext) != B.get_bitstream_path(base)
    assert B.get_bitstream_path(ext).endswith("1x16_i8w8a32_15_15_18_17_mul_acc8.bit")
    for built_for, other in ((ext, base), (base, ext)):
        d = tmp_path / "build" / built_for.BITSTREAM
        d.mkdir(parents=True)
        bit = d / f"{built_for.BITSTREAM}.bit"
        bit.write_bytes(b"bits")
        (d / "plan.json").write_text(json.dumps({"config": built_for.cfg_dict}))
        assert B.install_bitstream(bit, built_for) == B.get_bitstream_path(built_for)
        with pytest.raises(B.BitstreamError, match="built for a different configuration .differs in ISA_EXTENSIONS"):
            B.install_bitstream(bit, other)


def test_disassembler_names_the_extensions_and_marks_what_the_config_lacks():
    from vta_hw.spec import Opcode, disassemble
    base, ext = load_config(DEFAULT), load_config(DEFAULT).replace(ISA_EXTENSIONS=BOTH)
    words = [base.isa.load(MemType.ACC_8BIT, 0, 9, 1, 2, 2, x_pad_0=1),
             base.isa.alu.encode(opcode=Opcode.ALU, alu_opcode=AluOp.MUL, use_imm=1, imm=-3, uop_end=1, iter_out=1,
                                 iter_in=2)]
    lines = disassemble(words, ext.isa)
    assert "LOAD   ACC_8BIT sram=0x0000 dram=0x00000009" in lines[0] and "ALU    MUL  imm=-3" in lines[1]
    assert all(line.split()[1] == "compute" and "illegal" not in line for line in lines)
    marked = disassemble(words, base.isa)
    assert "[illegal: needs ISA extension acc_8bit]" in marked[0]
    assert "[illegal: needs ISA extension alu_mul]" in marked[1]
