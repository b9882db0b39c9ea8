"""conv2d on feature maps so small that the padding covers all but one row or column (the last stage of a
small network): the input DMA has a single in-bounds element along a padded dimension."""

from __future__ import annotations

import pytest

from vta_compiler.testing.layers import run_conv2d
from vta_compiler.top import Conv2DTiling, Conv2DWorkload

from .checks import assert_exact


@pytest.mark.parametrize("wkl", [
    Conv2DWorkload(1, 1, 1, 64, 64, 3, 3, 1, 1, 1, 1),      # 1x1 map, 3x3 kernel, pad 1
    Conv2DWorkload(1, 1, 4, 32, 32, 3, 3, 1, 1, 1, 1),      # one row
    Conv2DWorkload(1, 4, 1, 32, 32, 3, 3, 1, 1, 1, 1),      # one column
], ids=["1x1", "1x4", "4x1"])
def test_single_element_inside_the_padding(fsim, wkl):
    assert_exact(run_conv2d(wkl, name=f"{wkl.height}x{wkl.width}"))


def test_one_column_tiles_of_a_row_padded_input(fsim):
    # a 3x1 kernel padded only in height, one output column per tile (a tiling the tuner may pick for a
    # folded stem): the input copy's inner loop is the padded row loop, whose padding becomes the rows'
    wkl = Conv2DWorkload(1, 8, 6, 9, 16, 3, 1, 1, 0, 2, 1)
    assert_exact(run_conv2d(wkl, Conv2DTiling(tile_co=1, tile_h=2, tile_w=1, tile_ci=1), name="one-column"))
