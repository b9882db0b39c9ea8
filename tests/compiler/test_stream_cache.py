"""The command-stream cache: a compiled kernel's streams are built once and replayed while its buffers do not
change, and a replay hands the device the very words a fresh build writes."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import vta_compiler as vta
import vta_runtime
from sim.fsim import FsimDevice
from vta_compiler.transform.sync import inject_stream_cache

from .programs import build, elementwise, on_device


class RecordingFsim(FsimDevice):
    """fsim that keeps the instruction words of every stream it runs."""

    def __init__(self):
        super().__init__()
        self.streams: list[bytes] = []

    def run(self, insn_phys, insn_count, timeout=None):
        self.streams.append(self.dram.data[insn_phys:insn_phys + 16 * insn_count].tobytes())
        return super().run(insn_phys, insn_count, timeout)


@pytest.fixture
def dev():
    d = RecordingFsim()
    vta_runtime.set_command_queue(vta_runtime.CommandQueue(d))
    yield d
    vta_runtime.set_command_queue(None)


def _kernel(env):
    """acc = a + b, then >> 1, stored as int8: loads, ALU uop kernels, a store (one stream)."""
    sch, shape = elementwise(env, (4, 3, env.BATCH, env.BLOCK_OUT),
                             [lambda x, bs: (lambda *i: x(*i) + bs[1](*i)), lambda x, _: (lambda *i: x(*i) >> 1)],
                             n_inputs=2)
    return build(sch), shape


def _data(env, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(-200, 200, (4, 3, env.BATCH, env.BLOCK_OUT), dtype=np.int32) for _ in range(2)]


def _call(dev, mod, args, out):
    """Run the kernel once: (its stream words, the device counters it added, the result)."""
    before, n = dev.stats(), len(dev.streams)
    mod(*args, out)
    after = dev.stats()
    return b"".join(dev.streams[n:]), {k: after[k] - before[k] for k in after}, out.numpy()


def test_replay_runs_the_words_a_fresh_build_writes(dev):
    env = vta.get_env()
    mod, shape = _kernel(env)
    cq = vta_runtime.command_handle()
    a, b = _data(env, 0)
    args, out = on_device(a, b), tvm.runtime.empty(shape, "int8", device=tvm.ext_dev(0))
    want = ((a + b) >> 1).astype(np.int8)

    words1, counts1, got1 = _call(dev, mod, args, out)
    assert cq.stream_stats["builds"] == 1 and cq.stream_stats["replays"] == 0
    words2, counts2, got2 = _call(dev, mod, args, out)
    assert cq.stream_stats["replays"] == 1 and cq.stream_stats["builds"] == 1
    cq.stream_cache = False                       # a fresh build of the same call, for comparison
    words3, counts3, got3 = _call(dev, mod, args, out)
    assert cq.stream_stats["replays"] == 1 and cq.stream_stats["entries"] == 0
    assert len(words1) > 16 * 8
    assert words2 == words1 and words3 == words1
    assert counts2 == counts1 == counts3 and counts1["alu_counter"] > 0 and counts1["acc_load_nbytes"] > 0
    for got in (got1, got2, got3):
        np.testing.assert_array_equal(got, want)


def test_new_data_in_the_same_buffers_is_replayed_and_computed(dev):
    env = vta.get_env()
    mod, shape = _kernel(env)
    cq = vta_runtime.command_handle()
    args, out = on_device(*_data(env, 1)), tvm.runtime.empty(shape, "int8", device=tvm.ext_dev(0))
    mod(*args, out)
    a, b = _data(env, 2)
    args[0].copyfrom(a)
    args[1].copyfrom(b)
    mod(*args, out)
    assert cq.stream_stats["replays"] == 1
    np.testing.assert_array_equal(out.numpy(), ((a + b) >> 1).astype(np.int8))


def test_another_buffer_address_is_a_new_build(dev):
    env = vta.get_env()
    mod, shape = _kernel(env)
    cq = vta_runtime.command_handle()
    a, b = _data(env, 3)
    out = tvm.runtime.empty(shape, "int8", device=tvm.ext_dev(0))
    first = on_device(a, b)
    words1, _, _ = _call(dev, mod, first, out)
    other = on_device(b, a)                       # both alive: other addresses
    words2, _, got = _call(dev, mod, other, out)
    assert cq.stream_stats["builds"] == 2 and cq.stream_stats["replays"] == 0
    assert words2 != words1
    np.testing.assert_array_equal(got, ((a + b) >> 1).astype(np.int8))
    words3, _, _ = _call(dev, mod, first, out)    # the first call's entry is still there
    assert words3 == words1 and cq.stream_stats["replays"] == 1


def test_freeing_a_buffer_drops_its_streams(dev):
    env = vta.get_env()
    mod, shape = _kernel(env)
    cq = vta_runtime.command_handle()
    a, b = _data(env, 4)
    out = tvm.runtime.empty(shape, "int8", device=tvm.ext_dev(0))
    keep = on_device(b)[0]
    args = [on_device(a)[0], keep]
    mod(*args, out)
    assert cq.stream_stats["entries"] == 1
    args[0] = None                                # the input's device memory goes back to the device
    gc.collect()
    assert cq.stream_stats["entries"] == 0 and cq.stream_stats["dropped"] == 1
    args[0] = on_device(a)[0]                     # (the allocator may hand out the same address again)
    mod(*args, out)
    assert cq.stream_stats["builds"] == 2 and cq.stream_stats["replays"] == 0
    np.testing.assert_array_equal(out.numpy(), ((a + b) >> 1).astype(np.int8))


def test_a_busy_queue_is_not_cached(dev):
    """Instructions queued before the kernel belong to its stream: such a call is neither replayed nor kept."""
    env = vta.get_env()
    mod, shape = _kernel(env)
    cq = vta_runtime.command_handle()
    a, b = _data(env, 5)
    args, out = on_device(a, b), tvm.runtime.empty(shape, "int8", device=tvm.ext_dev(0))
    mod(*args, out)
    cq.dep_push(1, 2)                             # a token from load to compute, still queued
    cq.dep_pop(1, 2)
    words, _, got = _call(dev, mod, args, out)
    assert cq.stream_stats["uncached"] == 1 and cq.stream_stats["replays"] == 0
    np.testing.assert_array_equal(got, ((a + b) >> 1).astype(np.int8))
    words2, _, _ = _call(dev, mod, args, out)     # the entry of the clean call is unchanged
    assert cq.stream_stats["replays"] == 1 and len(words2) < len(words)


def test_debug_flags_are_part_of_the_key(dev, capsys):
    env = vta.get_env()
    sch, shape = elementwise(env, (2, 2, env.BATCH, env.BLOCK_OUT), [lambda x, _: (lambda *i: x(*i) >> 1)])
    mod = build(sch)
    cq = vta_runtime.command_handle()
    a = _data(env, 6)[0][:2, :2]
    args, out = on_device(a), tvm.runtime.empty(shape, "int8", device=tvm.ext_dev(0))
    w_plain, _, _ = _call(dev, mod, args, out)
    cq.debug_flags = env.DEBUG_FORCE_SERIAL      # the runtime rewrites the stream: another entry
    w_serial, _, got = _call(dev, mod, args, out)
    assert cq.stream_stats["builds"] == 2 and cq.stream_stats["replays"] == 0 and w_serial != w_plain
    np.testing.assert_array_equal(got, (a >> 1).astype(np.int8))
    cq.debug_flags = 0
    w_again, _, _ = _call(dev, mod, args, out)
    assert cq.stream_stats["replays"] == 1 and w_again == w_plain
    cq.debug_flags = env.DEBUG_DUMP_UOP          # printed while the stream is built: never replayed
    capsys.readouterr()
    for _ in range(2):
        mod(*args, out)
        assert "uop kernel" in capsys.readouterr().out
    assert cq.stream_stats["uncached"] == 2 and cq.stream_stats["replays"] == 1


@T.prim_func
def _reads_memory(a: T.Buffer((4,), "int32")):
    T.evaluate(T.call_packed("vta.runtime.DepPush", a[0], 2))
    T.evaluate(T.call_packed("vta.runtime.Synchronize", 0.0))


@T.prim_func
def _streams_only(a: T.Buffer((4,), "int32")):
    T.evaluate(T.call_packed("vta.runtime.LoadBuffer2D", a.data, 0, 1, 1, 1, 0, 0, 0, 0, 0, 3))
    T.evaluate(T.call_packed("vta.runtime.Synchronize", 0.0))


@T.prim_func
def _other_call(a: T.Buffer((4,), "int32")):
    T.evaluate(T.call_packed("vta.runtime.LoadBuffer2D", a.data, 0, 1, 1, 1, 0, 0, 0, 0, 0, 3))
    T.evaluate(T.call_packed("vta.runtime.BufferCopy", a.data, 0, a.data, 0, 4, 3))
    T.evaluate(T.call_packed("vta.runtime.Synchronize", 0.0))


def test_only_host_code_that_builds_streams_is_wrapped():
    env = vta.get_env()
    wrapped = inject_stream_cache(_streams_only, env)
    assert "vta.runtime.StreamBegin" in wrapped.script() and "vta.runtime.StreamEnd" in wrapped.script()
    # what the host code reads from memory, or another runtime call, would not be redone by a replay
    for func in (_reads_memory, _other_call):
        assert "StreamBegin" not in inject_stream_cache(func, env).script()
    # the key: every buffer's address with its size
    assert "a.data, T.int64(16)" in wrapped.script()
