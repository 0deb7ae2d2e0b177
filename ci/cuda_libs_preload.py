"""Make the cuDNN 8 / cuBLAS 11 wheels' libraries visible to OneFlow 0.9.0's extension.

Installed into the environment's site-packages by ci/bootstrap.sh and imported from a
.pth file at interpreter start-up. OneFlow's extension links these libraries even on
CPU, and the nvidia-* wheels put them in site-packages/nvidia/*/lib, which the loader
does not search. Loading them with RTLD_GLOBAL before `import oneflow` satisfies the
links without anyone exporting LD_LIBRARY_PATH. The loading waits for the first
`import oneflow`, so interpreters that never touch OneFlow pay nothing.
"""

import ctypes
import glob
import importlib.abc
import os
import sys


def _load_nvidia_libs() -> None:
    pending = []
    for path in sys.path:
        pending += sorted(glob.glob(os.path.join(path, "nvidia", "*", "lib", "lib*.so*")))
    # The libraries depend on one another; retry until no more can be loaded.
    while pending:
        failed = []
        for lib in pending:
            try:
                ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                failed.append(lib)
        if len(failed) == len(pending):
            break
        pending = failed


class _PreloadOnOneflowImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "oneflow":
            sys.meta_path.remove(self)
            _load_nvidia_libs()
        return None


sys.meta_path.insert(0, _PreloadOnOneflowImport())
