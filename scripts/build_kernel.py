"""Build kernel families in place (``lib/tenfold/_kernels/<family>*.so``) for development.

    python scripts/build_kernel.py bitpack [rs ...]     # the named families
    python scripts/build_kernel.py --all                # every family

It runs the package's own build (``setup.py build_ext --inplace``) restricted to the named
families through ``TENFOLD_KERNELS``, so the compiler flags are the ones a release uses. Needs
Cython and setuptools (both in the ``test`` extra).
"""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    env = dict(os.environ, TENFOLD_BUILD_EXT="1")
    if argv != ["--all"]:
        known = {
            f[:-4]
            for f in os.listdir(os.path.join(ROOT, "lib", "tenfold", "_kernels"))
            if f.endswith(".pyx")
        }
        unknown = sorted(set(argv) - known)
        if unknown:
            print(
                f"unknown kernel families {unknown}; expected some of {sorted(known)}",
                file=sys.stderr,
            )
            return 2
        env["TENFOLD_KERNELS"] = ",".join(argv)
    cmd = [
        sys.executable,
        "setup.py",
        "-q",
        "build_ext",
        "--inplace",
        "--build-temp",
        os.path.join("build", "kernels"),
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
