"""Check what the built wheel and sdist hold (run by scripts/test.sh after building them).

    python scripts/check_dist.py dist/tenfold-X-....whl dist/tenfold-X.tar.gz

- the sdist has every kernel source a build needs (``.pyx`` with its ``.pxd`` and C ``.h``
  headers and ``.pyi`` stubs) and no generated C or built object;
- the wheel has every kernel compiled, its stubs and ``py.typed``, no generated C, and its shared
  objects carry no debug sections.
Prints the sizes; exits 1 naming each problem.
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

KERNELS = Path(__file__).resolve().parents[1] / "lib" / "tenfold" / "_kernels"


def _expected(*suffixes: str) -> set[str]:
    return {p.name for s in suffixes for p in KERNELS.glob(f"*{s}")}


def check_sdist(path: Path) -> list[str]:
    with tarfile.open(path) as tf:
        names = [PurePosixPath(n) for n in tf.getnames()]
    kernels = {n.name for n in names if n.parent.name == "_kernels"}
    sources = _expected(".pyx", ".pxd", ".h", ".pyi")
    problems = [f"sdist lacks {n}" for n in sorted(sources - kernels)]
    problems += [f"sdist holds {n}" for n in names if n.suffix in {".c", ".so", ".html"}]
    return problems


def check_wheel(path: Path) -> list[str]:
    problems = []
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        names = [PurePosixPath(i.filename) for i in infos]
        built = {n.name.split(".")[0] for n in names if n.suffix == ".so"}
        families = {Path(n).stem for n in _expected(".pyx")}
        problems += [f"wheel lacks the compiled kernel {f}" for f in sorted(families - built)]
        problems += [f"wheel holds {n}" for n in names if n.suffix in {".c", ".html"}]
        if not any(n.name == "py.typed" for n in names):
            problems.append("wheel lacks py.typed")
        for i in infos:
            if i.filename.endswith(".so") and b".debug_info" in zf.read(i):
                problems.append(f"wheel's {i.filename} is not stripped (.debug_info)")
        unpacked = sum(i.file_size for i in infos)
    print(f"wheel {path.stat().st_size / 2**20:.1f} MiB ({unpacked / 2**20:.1f} MiB unpacked)")
    return problems


def main(argv: list[str]) -> int:
    problems: list[str] = []
    for arg in argv:
        p = Path(arg)
        problems += check_wheel(p) if p.suffix == ".whl" else check_sdist(p)
        if p.suffix != ".whl":
            print(f"sdist {p.stat().st_size / 2**20:.2f} MiB")
    for msg in problems:
        print(f"check_dist: {msg}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
