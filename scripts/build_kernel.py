"""Build one kernel family in place (``lib/tenfold/_kernels/<family>*.so``) for development.

    python scripts/build_kernel.py bitpack

Each family gets its own build directory, so several families can be built at once. Releases
and CI build every family through ``pip install .`` (setup.py); this script is only a shortcut
for an editable checkout.
"""

from __future__ import annotations

import os
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Distribution, Extension

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(family: str) -> None:
    src = os.path.join("lib", "tenfold", "_kernels", f"{family}.pyx")
    ext = Extension(
        f"tenfold._kernels.{family}",
        [src],
        include_dirs=[numpy.get_include()],
        extra_compile_args=["-O3"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )
    mods = cythonize(
        [ext],
        language_level=3,
        quiet=True,
        compiler_directives={"embedsignature": True, "cdivision": True, "autotestdict": False},
    )
    dist = Distribution({"ext_modules": mods, "package_dir": {"": "lib"}})
    cmd = dist.get_command_obj("build_ext")
    cmd.inplace = True
    cmd.build_temp = os.path.join("build", f"tmp-{family}")
    dist.run_command("build_ext")


if __name__ == "__main__":
    os.chdir(ROOT)
    for fam in sys.argv[1:]:
        build(fam)
