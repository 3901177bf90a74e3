"""ONNX: tenfold's own protobuf walk against the ``onnx`` package (``onnx.load`` +
``numpy_helper.to_array``), on the same models in the same run.

Cases:
* read every initializer of a model with its weights inline (``raw_data``), tenfold.load vs
  onnx.load + to_array for each;
* the same with the weights in an external data file;
* open and list (names, types, shapes; no tensor read), tenfold.open vs
  onnx.load(load_external_data=False).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
from _timing import best, row

import tenfold


def _models(tmp: str, quick: bool) -> tuple[str, str] | None:
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError:
        return None
    rng = np.random.default_rng(0)
    n, side = (20, 64) if quick else (200, 512)
    inits = [
        numpy_helper.from_array(
            rng.standard_normal((side, side)).astype(np.float32), f"layer{i}.weight"
        )
        for i in range(n)
    ]
    model = helper.make_model(helper.make_graph([], "g", [], [], initializer=inits))
    inline = os.path.join(tmp, "inline.onnx")
    onnx.save_model(model, inline)
    external = os.path.join(tmp, "external.onnx")
    onnx.save_model(model, external, save_as_external_data=True, location="external.data")
    return inline, external


def _touch(tensors: dict) -> float:
    return float(sum(float(np.asarray(a).reshape(-1)[-1]) for a in tensors.values()))


def run(quick: bool) -> list[dict]:
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = _models(tmp, quick)
        if paths is None:
            return [row("onnx models", 0.0, note="onnx not installed: skipped")]
        import onnx
        from onnx import numpy_helper

        repeat = 3 if quick else 5
        for label, path in zip(("inline", "external data"), paths, strict=True):
            ours = best(lambda p=path: _touch(tenfold.load(p)), repeat=repeat)

            def peer(p=path) -> float:
                m = onnx.load(p)
                return _touch({t.name: numpy_helper.to_array(t) for t in m.graph.initializer})

            rows.append(row(f"read every initializer ({label})", ours, "onnx", best(peer, repeat)))

        def ours_list(p=paths[0]) -> int:
            with tenfold.open(p) as r:
                return len([r.info(k).shape for k in r])

        def peer_list(p=paths[0]) -> int:
            m = onnx.load(p, load_external_data=False)
            return len([tuple(t.dims) for t in m.graph.initializer])

        rows.append(
            row(
                "open and list initializers",
                best(ours_list, repeat),
                "onnx",
                best(peer_list, repeat),
            )
        )
    return rows
