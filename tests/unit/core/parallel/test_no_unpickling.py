"""Nothing in `src/tgi/core/parallel` unpickles what another process sent: unpickling runs the sender's code, and the
store and the group's sockets can be reached by others (`dist_auth.py`). Read from the source's syntax tree:
no pickle-like module is imported, and none of the calls that unpickle is made (torch.distributed's
`*_object*` collectives, `torch.load`, numpy's `allow_pickle`, a multiprocessing `Connection.recv()`)."""

from __future__ import annotations

import ast
from pathlib import Path

import tgi.core.parallel

PARALLEL = Path(tgi.core.parallel.__file__).parent
#: modules whose loads run code
PICKLERS = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "marshal", "shelve", "joblib"}
#: calls that unpickle what they receive or read
UNPICKLING_CALLS = {
    "broadcast_object_list",
    "all_gather_object",
    "gather_object",
    "scatter_object_list",
    "send_object_list",
    "recv_object_list",
    "recv_object",
    "send_object",
    "receive_object",
}


def unpickling(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] in PICKLERS]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PICKLERS:
            found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Attribute) and node.attr in UNPICKLING_CALLS:
            found.append(node.attr)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            owner = getattr(func.value, "id", "") if isinstance(func, ast.Attribute) else ""
            if name == "load" and owner == "torch":
                found.append("torch.load")
            if name == "recv" and isinstance(func, ast.Attribute) and not node.args:
                found.append("Connection.recv() (unpickles)")
            if any(k.arg == "allow_pickle" for k in node.keywords):
                found.append(f"{name}(allow_pickle=...)")
    return found


def test_no_module_of_core_parallel_unpickles_what_it_receives():
    sources = sorted(PARALLEL.glob("*.py"))
    assert len(sources) > 10  # the package, not an empty folder
    found = {p.name: unpickling(ast.parse(p.read_text())) for p in sources}
    assert {name: calls for name, calls in found.items() if calls} == {}


def test_the_check_sees_each_way_of_unpickling():
    code = """
import pickle
from dill import loads
torch.load(path)
dist.broadcast_object_list(box, src=0)
dist.all_gather_object(out, obj)
links.receive_object(0)
conn.recv()
numpy.load(f, allow_pickle=True)
"""
    assert sorted(unpickling(ast.parse(code))) == sorted(
        [
            "import pickle",
            "from dill import ...",
            "torch.load",
            "broadcast_object_list",
            "all_gather_object",
            "receive_object",
            "Connection.recv() (unpickles)",
            "load(allow_pickle=...)",
        ]
    )
