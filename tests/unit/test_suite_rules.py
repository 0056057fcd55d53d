"""Rules the test suite keeps about itself, checked by reading its source (an official client says how often it
retries: `max_retries=0` unless a test means otherwise).

A test never decides by a race: no `assert` compares a wall-clock reading (or a difference of two) with a bound
under one second, nor two clocks with each other (`warm_s < cold_s / 3`, `max(gaps) < took / 4`). An order of
events is asserted through the events (a future, a log line, a counter); a liveness bound ("ends within 60 s")
keeps a margin of 10x what the slowest machine takes; a speed or stall is measured by a benchmark. A reading
compared with a deadline (`time.monotonic() < deadline`) is a liveness loop and passes.
"""

from __future__ import annotations

import ast
import itertools
import pathlib

TESTS = pathlib.Path(__file__).resolve().parents[1]
#: clock reads: `time.monotonic()`, `time.perf_counter()`, `time.time()`, `loop.time()`, their `_ns` forms
CLOCKS = {"monotonic", "perf_counter", "monotonic_ns", "perf_counter_ns", "time"}
MIN_BOUND_S = 1.0


def _is_clock_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    if isinstance(f, ast.Attribute) and f.attr in CLOCKS:
        return f.attr != "time" or (isinstance(f.value, ast.Name) and f.value.id in ("time", "loop"))
    return isinstance(f, ast.Name) and f.id in ("monotonic", "perf_counter")


class _Clocked:
    """The names of one scope (module or function) that hold clock readings or values derived from them."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def involves(self, node: ast.AST) -> bool:
        return any(
            _is_clock_call(n) or (isinstance(n, ast.Name) and n.id in self.names) for n in ast.walk(node)
        )

    def learn(self, scope: ast.AST) -> None:
        changed = True
        while changed:  # until no new name is derived (a name may be assigned after a use that derives it)
            changed = False
            for n in ast.walk(scope):
                targets: list[ast.AST] = []
                if isinstance(n, ast.Assign) and self.involves(n.value):
                    targets = n.targets
                elif (
                    isinstance(n, (ast.AugAssign, ast.AnnAssign)) and n.value and self.involves(n.value)
                ) or (isinstance(n, ast.comprehension) and self.involves(n.iter)):
                    targets = [n.target]
                elif (  # xs.append(clock) / xs.append(derived)
                    isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute)
                    and n.func.attr in ("append", "extend", "add")
                    and isinstance(n.func.value, ast.Name)
                    and any(self.involves(a) for a in n.args)
                ):
                    targets = [n.func.value]
                for t in targets:
                    for name in ast.walk(t):
                        if isinstance(name, ast.Name) and name.id not in self.names:
                            self.names.add(name.id)
                            changed = True


def _constant(node: ast.AST, module_constants: dict[str, float]) -> float | None:
    """The value of a numeric bound: a literal, a module constant, or arithmetic of those."""
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        return float(node.value)
    if isinstance(node, ast.Name):
        return module_constants.get(node.id)
    if isinstance(node, ast.Attribute):  # headless.CONNECT_ATTEMPT_S and the like: not known here
        return None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _constant(node.operand, module_constants)
        return None if v is None else -v
    if isinstance(node, ast.BinOp):
        a, b = _constant(node.left, module_constants), _constant(node.right, module_constants)
        if a is None or b is None:
            return None
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.Div) and b:
            return a / b
    return None


def _deadline(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and "deadline" in n.id.lower() for n in ast.walk(node))


def races_in(source: str) -> list[tuple[int, str]]:
    """(line, why) for every assert in `source` that a race could decide."""
    tree = ast.parse(source)
    constants: dict[str, float] = {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            v = _constant(n.value, {})
            if v is not None:
                constants[n.targets[0].id] = v
    found = []
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for scope in scopes:
        clocked = _Clocked()
        clocked.learn(scope)
        for n in ast.walk(scope):
            if not isinstance(n, ast.Assert):
                continue
            for cmp in (c for c in ast.walk(n.test) if isinstance(c, ast.Compare)):
                sides = [cmp.left, *cmp.comparators]
                for (a, b), op in zip(itertools.pairwise(sides), cmp.ops, strict=True):
                    if not isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)):
                        continue  # an equality is no race on time
                    timed_a, timed_b = clocked.involves(a), clocked.involves(b)
                    if not (timed_a or timed_b):
                        continue
                    if timed_a and timed_b:
                        if not (_deadline(a) or _deadline(b)):
                            found.append((n.lineno, "two clock readings compared with each other"))
                        continue
                    bound = _constant(b if timed_a else a, constants)
                    if bound is not None and abs(bound) <= MIN_BOUND_S:
                        found.append((n.lineno, f"a clock reading against {bound:g} s"))
    return sorted(set(found))


def test_the_rule_sees_the_races_it_forbids():
    bad = """
import time
GAP = 0.2
def t(start):
    took = time.monotonic() - start
    assert took < 0.5
    arrivals = []
    arrivals.append(time.monotonic())
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert max(gaps) < GAP
    assert max(gaps) < took / 4
    assert time.perf_counter() - start < 1
"""
    assert [line for line, _ in races_in(bad)] == [6, 10, 11, 12]
    fine = """
import time
def t(start):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pass
    assert time.monotonic() < deadline, "timed out"
    assert time.monotonic() - start < 60
    assert 3 <= time.monotonic() - start
    assert len([1]) < 0.5
"""
    assert races_in(fine) == []


def test_no_assert_in_the_suite_is_decided_by_a_race():
    found = [
        f"{path.relative_to(TESTS)}:{line}: {why}"
        for path in sorted(TESTS.rglob("*.py"))
        for line, why in races_in(path.read_text())
        if path.name != "test_suite_rules.py"
    ]
    assert not found, (
        "asserts that compare clocks (assert the events instead, or measure in a benchmark):\n"
        + ("\n".join(found))
    )


#: the official clients that retry on their own (openai and anthropic: twice, on a 429, a 5xx or a timeout)
RETRYING_CLIENTS = {"OpenAI", "AsyncOpenAI", "Anthropic", "AsyncAnthropic"}


def retrying_clients_in(source: str) -> list[int]:
    """Lines that build an official client without `max_retries=...`: its hidden retries would turn an
    overload or a failure the test should see into a pass, or a slow one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in RETRYING_CLIENTS and not any(k.arg == "max_retries" for k in node.keywords):
                found.append(node.lineno)
    return found


def test_every_official_client_in_the_suite_says_how_often_it_retries():
    assert retrying_clients_in("c = openai.OpenAI(base_url=u)\nd = Anthropic(max_retries=0)") == [1]
    found = [
        f"{path.relative_to(TESTS)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        for line in retrying_clients_in(path.read_text())
    ]
    assert not found, "official clients built without max_retries=0:\n" + "\n".join(found)


def test_no_two_test_files_share_a_name():
    """The test folders have no `__init__.py`: pytest imports each file as the module its basename names, so
    two files of one name anywhere in the tree are a collection error when one run collects both."""
    seen: dict[str, list[str]] = {}
    for path in TESTS.rglob("test_*.py"):
        seen.setdefault(path.name, []).append(str(path.relative_to(TESTS)))
    twice = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not twice, f"rename one of each: {twice}"
