"""cocotb suite: a dependency-token queue (counting semaphore) against a Python model."""

import random

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge
from cocotb_common import reset, start, v


@cocotb.test()
async def random_push_pop_matches_model(dut):
    await start(dut)
    rnd = random.Random(1)
    count = 0
    for _ in range(3000):
        push = rnd.random() < 0.5
        pop = rnd.random() < 0.5 and count > 0          # consumers pop only while avail
        dut.tok_push.value = int(push)
        dut.tok_pop.value = int(pop)
        await ReadOnly()
        assert v(dut.tok_count) == count and v(dut.tok_avail) == int(count > 0)
        await RisingEdge(dut.clk)
        count += int(push) - int(pop)
    dut.tok_push.value = 0
    dut.tok_pop.value = 0
    await RisingEdge(dut.clk)
    assert not v(dut.tok_overflow)


@cocotb.test()
async def pop_without_token_is_ignored_and_overflow_is_sticky(dut):
    await start(dut)
    dut.tok_push.value = 0
    dut.tok_pop.value = 1
    await RisingEdge(dut.clk)
    await ReadOnly()
    assert v(dut.tok_count) == 0
    await RisingEdge(dut.clk)
    dut.tok_pop.value = 0
    dut.tok_push.value = 1
    top = (1 << len(dut.tok_count)) - 1
    for _ in range(top):
        await RisingEdge(dut.clk)
    await ReadOnly()
    assert v(dut.tok_count) == top and not v(dut.tok_overflow)
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    await ReadOnly()
    assert v(dut.tok_count) == top and v(dut.tok_overflow), "a push at the maximum is reported, not lost silently"
    await RisingEdge(dut.clk)
    dut.tok_push.value = 0
    await reset(dut)
    await ReadOnly()
    assert v(dut.tok_count) == 0 and not v(dut.tok_overflow)
