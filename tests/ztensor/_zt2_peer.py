"""Run inside an interpreter that has ztensor==2.1.2 (never imported by the test process).

python _zt2_peer.py write SPEC.json OUT.zt   # write the objects SPEC describes
python _zt2_peer.py read FILE.zt             # print {name: {part: sha256 of its bytes}}
python _zt2_peer.py verify FILE.zt ...       # read, then verify (deep) each file: prints
                                             # {file: {"objects": as read, "verified": [n, m]}}
"""

import hashlib
import json
import sys

import numpy as np

import ztensor


def write(spec_path: str, out: str) -> None:
    spec = json.load(open(spec_path))
    opts = spec.get("options", {})
    with ztensor.Writer(out, **opts) as w:
        if spec.get("attributes") is not None:
            w.set_attributes(spec["attributes"])
        for obj in spec["objects"]:
            parts = {}
            for role, p in obj["parts"].items():
                entry = {
                    "data": np.frombuffer(bytes.fromhex(p["hex"]), np.uint8),
                    "dtype": p["dtype"],
                }
                if p.get("type"):
                    entry["logical"] = p["type"]
                if p.get("encoding"):
                    entry["encoding"] = p["encoding"]
                parts[role] = entry
            if obj["layout"] == "dense" and obj.get("attributes") is None:
                d = parts["data"]
                w.add(
                    obj["name"],
                    d["data"],
                    shape=obj["shape"],
                    dtype=d["dtype"],
                    logical=d.get("logical"),
                    encoding=d.get("encoding"),
                )
            else:
                w.add_object(
                    obj["name"],
                    shape=obj["shape"],
                    parts=parts,
                    layout=obj["layout"],
                    attributes=obj.get("attributes"),
                )


def read(path: str) -> None:
    print(json.dumps(_read(path)))


def _read(path: str) -> dict:
    out = {}
    with ztensor.open(path) as src:
        for name in src:
            t = src[name]
            out[name] = {
                "layout": t.layout,
                "shape": list(t.shape),
                "parts": {p: hashlib.sha256(t[p].tobytes()).hexdigest() for p in t.parts},
            }
    return out


def verify(paths: list[str]) -> None:
    out = {}
    for path in paths:
        objects = _read(path)
        with ztensor.open(path) as src:
            checked = list(src.verify(deep=True))
        out[path] = {"objects": objects, "verified": checked, "whole": list(ztensor.verify(path))}
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "verify":
        verify(sys.argv[2:])
    else:
        read(sys.argv[2])
