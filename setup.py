"""Build script: the Cython kernels under lib/tenfold/_kernels.

TENFOLD_BUILD_EXT selects what happens to the compiled kernels:

* ``1`` (default): build them; a failed build fails the install.
* ``0``: build nothing; tenfold runs on its pure-Python reference kernels.
* ``auto``: try to build; on failure install without them (and say so).
"""

import glob
import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

MODE = os.environ.get("TENFOLD_BUILD_EXT", "1").strip().lower()
if MODE not in {"0", "1", "auto"}:
    sys.exit(f"TENFOLD_BUILD_EXT must be 0, 1 or auto, not {MODE!r}")


class OptionalBuildExt(build_ext):
    """build_ext that, in ``auto`` mode, survives a compiler failure."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - auto mode degrades on purpose
            print(f"WARNING: tenfold kernels not built ({exc}); pure-Python fallback")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            print(f"WARNING: tenfold kernel {ext.name} not built ({exc})")


def extensions():
    if MODE == "0":
        return []
    import numpy
    from Cython.Build import cythonize
    from setuptools import Extension

    sources = sorted(glob.glob(os.path.join("lib", "tenfold", "_kernels", "*.pyx")))
    exts = [
        Extension(
            "tenfold._kernels." + os.path.splitext(os.path.basename(src))[0],
            [src],
            include_dirs=[numpy.get_include()],  # ztplan builds arrays with NumPy's C API
            extra_compile_args=["-O3"],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        )
        for src in sources
    ]
    return cythonize(
        exts,
        language_level=3,
        compiler_directives={"embedsignature": True, "cdivision": True, "autotestdict": False},
    )


setup(
    ext_modules=extensions(),
    cmdclass={"build_ext": OptionalBuildExt} if MODE == "auto" else {},
)
