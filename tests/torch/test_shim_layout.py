"""The shim stays thin (docs/torch.md, "Inside the shim"): private `torch._C` APIs are named in
one module, torch's functions are replaced in one module, and no module replaces another's
attributes (the profiler, record and graphs subscribe to the listeners instead)."""

import ast
from pathlib import Path

import trnsim.torch

SHIM = Path(trnsim.torch.__file__).parent
MODULES = sorted(SHIM.glob("*.py"))


def _uses_torch_c(tree) -> bool:
    return any(
        isinstance(n, ast.Attribute) and n.attr == "_C" and isinstance(n.value, ast.Name)
        and n.value.id == "torch"
        for n in ast.walk(tree)
    )  # fmt: skip


def _assigned_attributes(tree) -> list[str]:
    """`a.b = ...` and `setattr(...)` statements outside any class or function's own `self`."""
    out = []
    for n in ast.walk(tree):
        targets = n.targets if isinstance(n, ast.Assign) else []
        for t in targets:
            if isinstance(t, ast.Attribute):
                root = t
                while isinstance(root, ast.Attribute):
                    root = root.value
                if not (isinstance(root, ast.Name) and root.id in ("self", "cls_self")):
                    out.append(ast.unparse(t))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setattr":
            out.append(ast.unparse(n))
    return out


def test_private_torch_apis_are_used_from_one_module():
    users = [p.name for p in MODULES if _uses_torch_c(ast.parse(p.read_text()))]
    assert users == ["private.py"]


def test_torch_objects_are_replaced_in_one_module_only():
    """Only `wrappers` assigns to torch's objects; no module replaces a function or method of
    the shim's own on an object it did not make (as recording once replaced the allocator's
    `alloc`): listeners are how one part watches another."""
    trees = {p.name: ast.parse(p.read_text()) for p in MODULES}
    functions = {n.name for t in trees.values() for n in ast.walk(t)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}  # fmt: skip
    for name, tree in trees.items():
        assigned = _assigned_attributes(tree)
        torch_targets = [a for a in assigned if a.startswith(("torch.", "setattr("))]
        if name == "wrappers.py":
            assert torch_targets, "wrappers.py replaces torch functions"
        else:
            assert torch_targets == [], name
        patched = [a for a in assigned if a.rpartition(".")[2] in functions]
        deleted = [ast.unparse(t) for n in ast.walk(tree) if isinstance(n, ast.Delete)
                   for t in n.targets if isinstance(t, ast.Attribute)]  # fmt: skip
        assert (name, patched, deleted) == (name, [], []) or name == "wrappers.py"
