"""Runs the code blocks of one Markdown file, in order, as a reader pasting them would.

Started by ``test_doc_blocks.py`` in a fresh working directory, with a JSON document on stdin:
``{"file": <path shown in errors>, "blocks": [{"lang", "line", "code"}, ...]}``. Python blocks
are executed one after the other in one namespace (one interpreter session); shell blocks run
through ``bash -e`` in the same directory between them. The stand-ins for what a test machine
has not got (S3, a web server, a GPU) are set up here, for the blocks whose comments ask for
them (the markers are described in ``test_doc_blocks.py``). One line per block on stdout:
``RAN <line> <lang>`` or ``SKIPPED <line> <lang>: <reason>``; a failing block prints
``FAILED <file>:<line>`` and its traceback and ends the run with status 1.
"""

from __future__ import annotations

import builtins
import gc
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

#: extra -> (module that must be importable, what in a block needs it)
EXTRAS: dict[str, tuple[str, re.Pattern[str]]] = {
    "torch": ("torch", re.compile(r"\btenfold\.torch\b|^\s*(import|from) torch\b", re.M)),
    "jax": ("jax", re.compile(r"\btenfold\.jax\b|^\s*(import|from) jax\b", re.M)),
    "ray": ("ray.data", re.compile(r"\bread_ray\b|^\s*(import|from) ray\b", re.M)),
}
GPU_LINE = re.compile(r"#.*\bneeds a GPU\b")
CUDA = re.compile(r"""(["'])cuda(:\d+)?\1""")
S3_MARK = re.compile(r"#.*\bneeds\b.*\bS3\b")
HTTP_MARK = re.compile(r"#.*\bneeds\b.*\bweb server\b")
S3_URL = re.compile(r"s3://([a-z0-9][a-z0-9.-]*)")
HTTP_URL = re.compile(r"https?://[A-Za-z0-9.-]+(?::\d+)?")


def missing_extra(code: str) -> str | None:
    """The first extra the block needs that is not installed (or that the test was told to
    treat as missing through ``TENFOLD_DOCS_WITHOUT``), else None."""
    without = set(filter(None, os.environ.get("TENFOLD_DOCS_WITHOUT", "").split(",")))
    for extra, (module, pattern) in EXTRAS.items():
        if pattern.search(code):
            if extra in without:
                return extra
            try:  # imported, not only found: an install cut short (a full disk) leaves a
                importlib.import_module(module)  # package that is there and cannot import
            except Exception as exc:  # noqa: BLE001 - whatever stops it importing
                if not isinstance(exc, ModuleNotFoundError) or exc.name != module.split(".")[0]:
                    BROKEN[extra] = f"{type(exc).__name__}: {exc}"  # named where it is skipped
                return extra
    return None


#: extra -> why it is there but does not import (a broken install is not hidden as absent)
BROKEN: dict[str, str] = {}


def on_cpu(code: str) -> str:
    """``"cuda"`` -> ``"cpu"`` on the lines whose comment says they need a GPU."""
    return "\n".join(
        CUDA.sub(lambda m: f"{m.group(1)}cpu{m.group(1)}", ln) if GPU_LINE.search(ln) else ln
        for ln in code.split("\n")
    )


class StandIns:
    """The local servers, started the first time a block asks for one, stopped at the end."""

    def __init__(self) -> None:
        self.s3: Any = None
        self.http: Any = None

    def s3_mirror(self, code: str) -> None:
        """Every bucket the block names holds the working directory's files, same paths."""
        if self.s3 is None:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
            from _servers import S3Server

            self.s3 = S3Server().__enter__()
            os.environ.update(
                AWS_ENDPOINT_URL_S3=self.s3.endpoint,  # what s3fs's botocore client reads
                AWS_ACCESS_KEY_ID="testing",
                AWS_SECRET_ACCESS_KEY="testing",
                AWS_DEFAULT_REGION="us-east-1",
            )
        fs = self.s3.filesystem()
        for bucket in sorted(set(S3_URL.findall(code))):
            if not fs.exists(bucket):
                fs.mkdir(bucket, acl="public-read")  # "anon": True reads too
            for path in sorted(Path.cwd().rglob("*")):
                if path.is_file():
                    rel = path.relative_to(Path.cwd()).as_posix()
                    fs.pipe(f"{bucket}/{rel}", path.read_bytes(), ACL="public-read")
        fs.invalidate_cache()

    def http_base(self) -> str:
        """A server on 127.0.0.1 serving the working directory: a URL's path names the file
        its longest tail that exists there names (``/org/m/resolve/main/a.json`` -> ``a.json``)."""
        if self.http is None:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
            from _servers import RangeServer

            class Files:
                def get(self, path: str) -> bytes | None:
                    parts = [p for p in path.split("/") if p]
                    for i in range(len(parts)):
                        f = Path.cwd().joinpath(*parts[i:])
                        if ".." not in parts and f.is_file():
                            return f.read_bytes()
                    return None

            self.http = RangeServer().__enter__()
            self.http.httpd.objects = Files()
        return self.http.url("").rstrip("/")

    def close(self) -> None:
        for srv in (self.http, self.s3):
            if srv is not None:
                srv.__exit__(None, None, None)


def _in_tenfold(filename: str) -> bool:
    """Whether a warning was raised by tenfold's own code (not by a library a block uses,
    whose path may contain "tenfold" too: a venv made for tenfold's tests)."""
    import tenfold

    pkg = Path(tenfold.__file__).resolve().parent
    try:
        return Path(filename).resolve().is_relative_to(pkg)
    except (OSError, ValueError):
        return False


def run_python(code: str, line: int, file: str, ns: dict[str, Any]) -> None:
    # padded so that tracebacks give the Markdown file's own line numbers
    compiled = compile("\n" * (line - 1) + code, file, "exec")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compiled, ns)
        gc.collect()  # a reader the block dropped without closing warns now
    for w in caught:
        if issubclass(w.category, ResourceWarning) or _in_tenfold(w.filename):
            raise AssertionError(f"the block warns: {w.category.__name__}: {w.message}")


def main() -> int:
    doc = json.load(sys.stdin)
    file = doc["file"]
    ns: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    stand = StandIns()
    try:
        for block in doc["blocks"]:
            lang, line, code = block["lang"], block["line"], block["code"]
            extra = missing_extra(code)
            if extra is not None:
                why = f"; installed but does not import: {BROKEN[extra]}" if extra in BROKEN else ""
                print(f"SKIPPED line {line - 1}: needs the {extra} extra (tenfold[{extra}]){why}")
                continue
            code = on_cpu(code)
            if S3_MARK.search(code):
                stand.s3_mirror(code)
            if HTTP_MARK.search(code):
                code = HTTP_URL.sub(stand.http_base(), code)
            sys.stdout.flush()
            t0 = time.perf_counter()
            try:
                if lang == "python":
                    run_python(code, line, file, ns)
                else:
                    sys.stderr.flush()
                    subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], check=True)
            except BaseException:
                print(f"FAILED {file}:{line} ({lang} block)")
                traceback.print_exc(file=sys.stdout)
                return 1
            print(f"RAN {line} {lang} {time.perf_counter() - t0:.1f} s")
    finally:
        stand.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
