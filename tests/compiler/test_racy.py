"""The race detector itself (``racy.py``): it ends runs with fsim's balance check, and it sees races.

Negative controls: with the dependency-token pass disabled, or with only its loop-carried pairs
dropped, the same programs that the racy fsim runs correctly with tokens come out wrong.
"""

from __future__ import annotations

import numpy as np
import pytest

from vta_compiler.testing.layers import run_conv2d
from vta_compiler.top import Conv2DTiling, Conv2DWorkload
from vta_compiler.transform import deps
from vta_hw.spec import Isa, MemType
from vta_runtime import UnbalancedTokensError

from .checks import assert_exact
from .racy import RacyFsim

SMALL = Conv2DWorkload(1, 8, 8, 32, 32, 3, 3, 1, 1, 1, 1)
SEEDS = [0, 1, 2]


def _run_words(dev, words):
    data = Isa.to_bytes(words)
    phys = dev.alloc(len(data))
    dev.write(phys, data)
    dev.run(phys, len(words), timeout=60)


@pytest.mark.parametrize("seed", SEEDS)
def test_racy_fsim_refuses_tokens_left_at_finish(seed):
    dev = RacyFsim(seed=seed)
    isa = dev.config.isa
    # FINISH may run before or after the load: either way the run ends unbalanced
    with pytest.raises(UnbalancedTokensError, match=r"not balanced: (1 token\(s\) remain in l2g \(load->compute\)|"
                       r"load has 1 instruction\(s\) left from #0)"):
        _run_words(dev, [isa.load(MemType.INP, 0, 0, 0, 0, 0, push_next_dep=1), isa.finish_insn()])
    with pytest.raises(UnbalancedTokensError, match=r"store has 1 instruction\(s\) left from #0"):
        _run_words(dev, [isa.store(0, 0, 0, 0, 0, memory_type=MemType.UOP, pop_prev_dep=1), isa.finish_insn()])


def _wrong(r) -> int:
    return int(np.count_nonzero(r.output != r.expected))


@pytest.mark.parametrize("seed", SEEDS)
def test_without_dependency_tokens_the_racy_fsim_gets_wrong_results(racy, seed):
    tiling = Conv2DTiling(2, 4, 8, 1, 2, 1)           # two tiles, virtual threads over output channels
    racy(seed)
    assert_exact(run_conv2d(SMALL, tiling, seed=seed))
    racy(seed)
    r = run_conv2d(SMALL, tiling, seed=seed, build_kwargs={"disabled_pass": ["vta.InjectDepTokens"]})
    assert _wrong(r) > r.expected.size // 10, "the race detector missed a program without any tokens"


@pytest.mark.parametrize("tiling", [Conv2DTiling(1, 4, 8, 1, 1, 1), Conv2DTiling(2, 4, 8, 1, 2, 1),
                                    Conv2DTiling(2, 4, 8, 1, 1, 1, "ko", 2)],
                         ids=["single-buffers", "oc-vthreads", "pipelined-chunks"])
def test_without_loop_carried_tokens_the_racy_fsim_gets_wrong_results(racy, monkeypatch, tiling):
    """Only the pairs that guard a buffer reused by the next loop iteration are dropped. One random
    interleaving may happen to respect the missing order, so the detector gets a few (fixed) seeds: it
    must see the race in at least one of them, and the complete program must be exact in every one."""
    plan = deps._plan_sequence
    dropped = []

    def without_carried(sums, inner, periodic):
        pairs = plan(sums, inner, periodic)
        dropped.extend(p for p in pairs if p[4])
        return [p for p in pairs if not p[4]]
    wrong = []
    for seed in range(6):
        monkeypatch.undo()
        racy(seed)
        assert_exact(run_conv2d(SMALL, tiling, seed=seed))
        monkeypatch.setattr(deps, "_plan_sequence", without_carried)
        racy(seed)
        wrong.append(_wrong(run_conv2d(SMALL, tiling, seed=seed)))
        if wrong[-1]:
            break
    assert dropped, "the schedule has no loop-carried token pairs to drop"
    assert max(wrong) > 0, f"the race detector missed the missing loop-carried tokens under {len(wrong)} interleavings"
