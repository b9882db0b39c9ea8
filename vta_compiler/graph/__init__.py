"""Whole quantized networks on VTA (Relax, TVM 0.27): import, quantize, graph_pack, build, run.

```python
mod, params = graph.from_onnx(onnx.load("model.onnx"))        # or relax.frontend.nn's export_tvm
qmod = graph.quantize(mod, params, calibration=[x0, x1])       # or global_scale=8.0; calibrate="mse", ...
print(graph.sensitivity(mod, params, [x0, x1]))                # accuracy lost by each layer alone in int8
pmod = graph.graph_pack(qmod)                                  # VTA layers in packed layouts
print(graph.placement(pmod))                                   # each op: VTA or CPU, and why
ex = graph.build(pmod)
vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
prof = graph.profile(ex, x, device="tsim", placement=graph.placement(pmod))   # where the time goes
```
"""

from __future__ import annotations

from .build import GRAPH_PIPELINE, build
from .frontend import from_onnx
from .ir import GraphError
from .match import patterns
from .pack import graph_pack
from .profiler import Profile, profile
from .quantize import QuantizationError, fewest_float_layers, layer_outputs, probe, quantize, sensitivity
from .report import Placement, placement
from .sensitivity import Sensitivity, agreement

__all__ = ["GRAPH_PIPELINE", "GraphError", "Placement", "Profile", "QuantizationError", "Sensitivity", "agreement",
           "build", "fewest_float_layers", "from_onnx", "graph_pack", "layer_outputs", "patterns", "placement",
           "probe", "profile", "quantize", "sensitivity"]
