"""Build script: the Cython kernels under lib/tenfold/_kernels.

TENFOLD_BUILD_EXT selects what happens to the compiled kernels:

* ``1`` (default): build them; a failed build fails the install.
* ``0``: build nothing; tenfold runs on its pure-Python reference kernels.
* ``auto``: try to build (Cython and the C compiler both); on failure install without them
  (and say so).

The kernels are translated and compiled in parallel, one job per core this process may use
(``os.sched_getaffinity``), capped by ``TENFOLD_BUILD_JOBS``. ``TENFOLD_KERNELS=a,b`` builds only
those families (``scripts/build_kernel.py`` uses it for in-place rebuilds).
"""

import glob
import os
import sys
import time

from setuptools import setup
from setuptools.command.build_ext import build_ext

MODE = os.environ.get("TENFOLD_BUILD_EXT", "1").strip().lower()
if MODE not in {"0", "1", "auto"}:
    sys.exit(f"TENFOLD_BUILD_EXT must be 0, 1 or auto, not {MODE!r}")


def _jobs():
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    cap = os.environ.get("TENFOLD_BUILD_JOBS", "").strip()
    return max(1, min(cores, int(cap))) if cap else max(1, cores)


def _say(msg):
    # pip shows a build's output with -v (and always when it fails)
    print(f"tenfold: {msg}", flush=True)


class BuildExt(build_ext):
    """build_ext compiling the kernels in parallel, saying what it does; in ``auto`` mode it
    survives a compiler failure."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = _jobs()

    def run(self):
        t = time.monotonic()
        _say(f"compiling {len(self.extensions)} kernels with {self.parallel} parallel jobs")
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - auto mode degrades on purpose
            if MODE != "auto":
                raise
            _say(f"WARNING: kernels not built ({exc}); pure-Python fallback")
        _say(f"kernels compiled in {time.monotonic() - t:.0f} s")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            if MODE != "auto":
                raise
            _say(f"WARNING: kernel {ext.name} not built ({exc})")


def extensions():
    if MODE == "0":
        return []
    import numpy
    from setuptools import Extension

    only = {f for f in os.environ.get("TENFOLD_KERNELS", "").split(",") if f}
    sources = sorted(glob.glob(os.path.join("lib", "tenfold", "_kernels", "*.pyx")))
    if only:
        sources = [s for s in sources if os.path.splitext(os.path.basename(s))[0] in only]
    # stripped shared objects on Linux (the debug sections are most of each file)
    link = ["-Wl,--strip-debug"] if sys.platform.startswith("linux") else []
    # C headers beside the .pyx (crc32c's _crc32c_impl.h): a change to one rebuilds the kernels
    headers = sorted(glob.glob(os.path.join("lib", "tenfold", "_kernels", "*.h")))
    exts = [
        Extension(
            "tenfold._kernels." + os.path.splitext(os.path.basename(src))[0],
            [src],
            depends=headers,
            include_dirs=[numpy.get_include()],  # ztplan builds arrays with NumPy's C API
            extra_compile_args=["-O3"],
            extra_link_args=link,
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        )
        for src in sources
    ]
    try:
        from Cython.Build import cythonize

        t = time.monotonic()
        out = cythonize(
            exts,
            language_level=3,
            nthreads=_jobs(),
            quiet=True,
            compiler_directives={"embedsignature": True, "cdivision": True, "autotestdict": False},
        )
        _say(f"{len(exts)} kernels translated by Cython in {time.monotonic() - t:.0f} s")
        return out
    except Exception as exc:  # noqa: BLE001 - auto mode degrades on purpose
        if MODE != "auto":
            raise
        _say(f"WARNING: Cython could not translate the kernels ({exc}); pure-Python fallback")
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt})
