"""The ResNet-18 figures of the profiling guide (``docs/guide/profiling.md``), measured once and kept small.

``python docs/profiling_figures.py`` builds ResNet-18 (224x224, batch 1, the default configuration, the
shipped tilings), profiles it on tsim's profile build (a warm-up inference, then the least disturbed of three: a
few minutes, tsim runs the network four times), and writes into ``docs/_static/profiling/``: the table
(``resnet18_table.txt``), its figures (``resnet18_profile.json``: the layers and host operators, no
timeline), the whole inference as a timeline picture, one layer's first microseconds with every module's
instructions, and the roofline. The docs build only shows these files; run this again after a change that
moves the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "_static" / "profiling"
#: the layer whose start the zoomed picture shows (a 1x1 stride-2 convolution: dependency waits), and how much
ZOOM_LAYER, ZOOM_US = "conv2d_7", 60.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--image", type=int, default=224)
    args = p.parse_args(argv)
    sys.path.insert(0, str(HERE.parent))
    from vta_compiler import graph
    from vta_compiler.graph.models import imagenet_like, resnet_onnx

    t0 = time.perf_counter()
    mod, params = graph.from_onnx(resnet_onnx(18, image=args.image))
    qmod = graph.quantize(mod, params, calibration=[imagenet_like(1, args.image, seed=s) for s in (11, 12)])
    pmod = graph.graph_pack(qmod)
    ex = graph.build(pmod)
    print(f"built in {time.perf_counter() - t0:.0f} s", flush=True)
    t0 = time.perf_counter()
    prof = graph.profile(ex, imagenet_like(1, args.image, seed=13), "tsim", placement=graph.placement(pmod),
                         warmup=1, repeat=3)
    print(f"profiled in {time.perf_counter() - t0:.0f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    table = prof.table()
    print(table)
    (args.out / "resnet18_table.txt").write_text(table + "\n")
    (args.out / "resnet18_profile.json").write_text(json.dumps(prof.to_dict(), indent=1) + "\n")
    name = f"ResNet-18 ({args.image}x{args.image})"
    prof.plot_timeline(args.out / "resnet18_timeline.png", title=f"{name} on tsim: one inference")
    runs = [e for e in prof.trace()["traceEvents"] if e["ph"] == "X" and e["cat"] == "run"]
    span = next(e for e in prof.trace()["traceEvents"] if e["ph"] == "X" and e["cat"] == "layer" and
                e["name"] == ZOOM_LAYER)
    first = min((r for r in runs if r["ts"] >= span["ts"]), key=lambda r: r["ts"])
    prof.plot_timeline(args.out / f"resnet18_{ZOOM_LAYER}.png", window_us=(first["ts"] - 1, first["ts"] + ZOOM_US),
                       title=f"{name}: the first {ZOOM_US:g} us of {ZOOM_LAYER}'s run on VTA")
    prof.plot_roofline(args.out / "resnet18_roofline.png", title=f"{name} on tsim: the layers under the roofline")
    for f in sorted(args.out.iterdir()):
        print(f"{f} ({f.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
