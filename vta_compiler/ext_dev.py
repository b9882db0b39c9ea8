"""Build (once, cached) and load the ``ext_dev`` DeviceAPI plugin (``ext_dev.cc``) when TVM first needs it.

``install()`` (run by ``import vta_compiler``) registers the runtime's global functions and a
``device_api.ext_dev`` that TVM calls the first time it needs the ext_dev device (allocating a
tensor, querying the device): only then is the plugin compiled with the system C++ compiler
against the headers of the installed apache-tvm / apache-tvm-ffi wheels, cached under
``build/ext_dev/<hash>/`` (or ``$VTA_CACHE_DIR``) keyed by the source, the compiler command and
the TVM versions, and loaded. A failed build raises ``ExtDevBuildError`` there, with the
compiler's message.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import tvm_ffi

from vta_runtime import cxx

SOURCE = Path(__file__).with_name("ext_dev.cc")
#: The name TVM looks up for device type 12, and the plugin's own name for its DeviceAPI.
DEVICE_API = "device_api.ext_dev"
PLUGIN_DEVICE_API = "vta.ext_dev.device_api"
_lib: ctypes.CDLL | None = None


@tvm_ffi.register_error   # keeps its type when raised inside TVM's device lookup
class ExtDevBuildError(RuntimeError):
    """The ext_dev plugin could not be compiled, so ext_dev tensors cannot be allocated."""


def _command(out: Path) -> list[str]:
    import tvm
    import tvm_ffi
    tvm_dir = Path(tvm.__file__).parent
    ffi_dir = Path(tvm_ffi.__file__).parent
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or "c++"
    return [cxx, "-std=c++17", "-O2", "-shared", "-fPIC", str(SOURCE), "-o", str(out),
            f"-I{tvm_dir / 'include'}", f"-I{ffi_dir / 'include'}",
            f"-L{tvm_dir / 'lib'}", "-ltvm_runtime", f"-L{ffi_dir / 'lib'}", "-ltvm_ffi",
            f"-Wl,-rpath,{tvm_dir / 'lib'}:{ffi_dir / 'lib'}"]


def library_path() -> Path:
    """The plugin's path, compiling it first if the cache has no build for this source and TVM."""
    import tvm
    import tvm_ffi
    probe = _command(Path("OUT"))
    key = hashlib.sha256("\0".join([SOURCE.read_text(), *probe, tvm.__version__,
                                    tvm_ffi.__version__]).encode()).hexdigest()[:16]
    path = cxx.cache_dir() / "ext_dev" / key / "libvta_ext_dev.so"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        tmp_out = Path(tmp) / path.name
        cmd = _command(tmp_out)
        try:
            res = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as exc:
            raise ExtDevBuildError(f"cannot run the C++ compiler {cmd[0]!r} to build the VTA ext_dev plugin "
                                   f"(needed for ext_dev tensors): {exc}; set $CXX to a C++17 compiler") from None
        if res.returncode != 0:
            raise ExtDevBuildError(f"building the VTA ext_dev plugin (needed for ext_dev tensors) failed: {cmd[0]} "
                                   f"exited with {res.returncode} (set $CXX to another C++17 compiler if this one "
                                   "cannot build it):\n" + " ".join(cmd) + "\n" + res.stderr[-4000:])
        os.replace(tmp_out, path)   # atomic: concurrent builders never see a half-written file
    return path


def load() -> ctypes.CDLL:
    """Build if needed and load the plugin (once per process), and register the runtime's functions."""
    global _lib
    if _lib is None:
        from vta_runtime import tvm_bridge
        path = library_path()
        tvm_bridge.register()
        _lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        import tvm_ffi
        # ext_dev tensors still alive at exit must not call into a Python that is shutting down
        atexit.register(tvm_ffi.get_global_func("vta.ext_dev.Shutdown"))
    return _lib


def _device_api():
    import tvm
    load()
    return tvm.get_global_func(PLUGIN_DEVICE_API)()


def install() -> None:
    """Make ``tvm.ext_dev`` usable: the runtime's global functions now, the plugin on first use."""
    import tvm

    from vta_runtime import tvm_bridge
    tvm_bridge.register()
    tvm.register_global_func(DEVICE_API, _device_api, override=True)
