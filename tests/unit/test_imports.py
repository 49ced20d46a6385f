"""Layering rules that keep the package simple, read from the source with ast (imports at module level and
inside functions alike):

- imports inside functions only for optional dependencies (and the few ``DEFERRED`` ones), in megamlm/, tools/,
  benchmarks/ and pretrain.py;
- the lowest floor (``FLOOR``) imports nothing from megamlm but the floor;
- ``megamlm.config`` imports neither ``megamlm.parallel``, ``megamlm.training`` nor ``megamlm.hf``;
- ``megamlm.model`` imports neither ``megamlm.parallel`` nor ``megamlm.training``;
- ``megamlm.parallel`` imports no ``megamlm.training`` (parallelism is applied to a model from outside the loop);
- ``megamlm.kernels`` imports nothing from megamlm but the floor (the model calls the kernels, not the other way);
- ``megamlm.checkpoint`` imports neither ``megamlm.training`` nor ``megamlm.parallel`` (the loop reads checkpoints);
- no import circle between two megamlm modules, ``if TYPE_CHECKING:`` imports included;
- a module re-exports nothing: a name in its ``__all__`` is defined there (packages' ``__init__`` aside).

The megamlm rules follow imports through megamlm's own modules (importing ``a.b.c`` runs ``a`` and ``a.b`` too),
so a rule cannot be broken by way of a module in between; a failure names the chain.
"""

import ast
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "megamlm"
SOURCES = (PACKAGE, ROOT / "tools", ROOT / "benchmarks", ROOT / "pretrain.py")
# Optional extras (or expensive GPU-only paths) that must never be needed to import megamlm or start a tool.
OPTIONAL = ("transformers", "datasets", "huggingface_hub", "matplotlib", "tiktoken", "sentencepiece", "zstandard",
            "pyarrow", "flash_attn", "transformer_engine", "apex", "mpi4py", "gguf", "triton", "torchao",
            "torch.nn.attention.flex_attention", "accelerate", "seqeval", "sklearn", "trackio", "wandb",
            "mlflow", "mteb", "sentence_transformers")
# Imports a module defers into a function although they are not optional: the flag parser's package must import
# without torch, so pretrain.py --help and a flag error answer in a moment (issue 31, item 10).
DEFERRED = {"megamlm/config/phase_data.py": ("megamlm.data.sidecar", "megamlm.data.blending"),
            # About 2 s of every run's start-up, for the pipeline layouts only.
            "megamlm/parallel/pipeline.py": ("torch.distributed.pipelining",),
            # The pilot's --help and a bad candidate answer before torch and the data package are imported.
            "tools/pilot_miniature.py": ("megamlm.data", "megamlm.data.embedded", "megamlm.data.unigram",
                                         "megamlm.eval.registry", "megamlm.study.planning.pilot",
                                         "megamlm.training.metrics_file")}
# The lowest floor: modules any other may import, which import nothing from megamlm but each other.
FLOOR = ("megamlm", "megamlm.errors", "megamlm.log", "megamlm.launcher_env", "megamlm.extras", "megamlm.env_args",
         "megamlm.precision", "megamlm.figures", "megamlm.kernel_backends")


def python_files(source: Path) -> list[Path]:
    return [source] if source.suffix == ".py" else sorted(source.rglob("*.py"))


def module_name(path: Path) -> str:
    """``megamlm/model/config.py`` -> ``megamlm.model.config``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed once for every rule that reads it."""
    return ast.parse(path.read_text())


@lru_cache(maxsize=None)
def imports(path: Path) -> tuple:
    """(line, imported module, names taken from it, inside a function) for every import in ``path``, relative
    imports resolved: ``from a import b`` gives ``a`` and ``("b",)``, ``import a.b`` gives ``a.b`` and ``()``."""
    return tuple(_imports(path))


def _imports(path: Path):
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = parsed(path)
    in_function = {id(sub) for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for sub in ast.walk(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, (), id(node) in in_function
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            yield node.lineno, base, tuple(alias.name for alias in node.names), id(node) in in_function


def is_under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@lru_cache(maxsize=1)
def megamlm_graph() -> dict[str, set[str]]:
    """megamlm module -> the megamlm modules it imports (with the packages above them)."""
    modules = {module_name(path): path for path in python_files(PACKAGE)}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for _, imported, names, _ in imports(path):
            parts = imported.split(".")
            targets |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & modules.keys()
            targets |= {f"{imported}.{name}" for name in names} & modules.keys()  # ``from a import b``, b a module
        parents = name.split(".")
        targets |= {".".join(parents[:i]) for i in range(1, len(parents))}  # a module runs its packages first
        graph[name] = targets - {name}
    return graph


@lru_cache(maxsize=1)
def explicit_graph() -> dict[str, set[str]]:
    """megamlm module -> the megamlm modules its import statements name (``from a import b``: ``a.b`` where b is a
    module, else ``a``), without the packages a module runs first: the graph an import circle is a cycle of."""
    modules = {module_name(path): path for path in python_files(PACKAGE)}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for _, imported, names, _ in imports(path):
            submodules = {f"{imported}.{n}" for n in names} & modules.keys()
            if imported in modules and (not names or len(submodules) < len(names)):
                targets.add(imported)
            targets |= submodules
        graph[name] = targets - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle of ``graph``: the modules of each strongly connected part of more than one module, and
    one module that imports itself back through others, named in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, targets = work[-1]
            target = next((t for t in targets if t in graph), None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    part.append(member)
                    if member == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return found


def reached(start: str) -> dict[str, list[str]]:
    """Every megamlm module that importing ``start`` runs, each with one import chain leading to it."""
    graph = megamlm_graph()
    chains = {start: [start]}
    todo = [start]
    while todo:
        current = todo.pop()
        for target in sorted(graph.get(current, ())):
            if target not in chains:
                chains[target] = [*chains[current], target]
                todo.append(target)
    return chains


def violations(prefix: str, forbidden: tuple[str, ...]) -> list[str]:
    """The chains by which a module under ``prefix`` imports one under a ``forbidden`` prefix."""
    found = []
    for module in sorted(m for m in megamlm_graph() if is_under(m, prefix)):
        for target, chain in reached(module).items():
            if any(is_under(target, f) for f in forbidden):
                found.append(" -> ".join(chain))
    return found


def test_only_optional_dependencies_are_imported_inside_functions():
    offending = [f"{path.relative_to(ROOT)}:{line} {module}" for source in SOURCES for path in python_files(source)
                 for line, module, _, inside in imports(path)
                 if inside and not any(is_under(module, optional) for optional in OPTIONAL)
                 and module not in DEFERRED.get(path.relative_to(ROOT).as_posix(), ())]
    assert offending == []


def test_the_lowest_floor_imports_nothing_from_megamlm_above_it():
    graph = megamlm_graph()
    assert set(FLOOR) <= graph.keys()
    offending = [f"{module} imports {target}" for module in FLOOR for target in sorted(graph[module])
                 if target not in FLOOR]
    assert offending == []


def test_config_imports_neither_parallel_training_nor_hf():
    assert violations("megamlm.config", ("megamlm.parallel", "megamlm.training", "megamlm.hf")) == []


def test_model_imports_neither_parallel_nor_training():
    assert violations("megamlm.model", ("megamlm.parallel", "megamlm.training")) == []


def test_parallel_imports_no_training():
    assert violations("megamlm.parallel", ("megamlm.training",)) == []


def test_kernels_import_nothing_above_the_floor():
    offending = [f"{module} imports {target}" for module, targets in sorted(megamlm_graph().items())
                 if is_under(module, "megamlm.kernels") for target in sorted(targets)
                 if not is_under(target, "megamlm.kernels") and target not in FLOOR]
    assert offending == []


def test_checkpoint_imports_neither_training_nor_parallel():
    assert violations("megamlm.checkpoint", ("megamlm.training", "megamlm.parallel")) == []


def test_no_import_circle():
    assert circles(explicit_graph()) == []


def test_a_circle_is_found_also_through_a_type_checking_import(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import f\n")
    (tmp_path / "pkg" / "b.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                                           "    from pkg.a import g\n")
    (tmp_path / "pkg" / "c.py").write_text("from pkg import a\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    graph = {module_name(path): {i for _, i, _, _ in imports(path) if i.startswith("pkg.")}
             for path in python_files(tmp_path / "pkg")}
    assert circles(graph) == [["pkg.a", "pkg.b"]]


def test_no_module_re_exports_what_it_imports():
    offending = []
    for path in python_files(PACKAGE):
        if path.name == "__init__.py":
            continue
        tree = parsed(path)
        imported = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                    for alias in node.names}
        exported = {elt.value for node in tree.body if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
                    for elt in getattr(node.value, "elts", []) if isinstance(elt, ast.Constant)}
        offending += [f"{path.relative_to(ROOT)} re-exports {name}" for name in sorted(exported & imported)]
    assert offending == []


def test_a_rule_names_the_chain_that_breaks_it(monkeypatch):
    graph = {"megamlm.parallel.a": {"megamlm.parallel.b"}, "megamlm.parallel.b": {"megamlm.training.step"},
             "megamlm.training.step": set()}
    monkeypatch.setitem(globals(), "megamlm_graph", lambda: graph)
    assert violations("megamlm.parallel", ("megamlm.training",)) == [
        "megamlm.parallel.a -> megamlm.parallel.b -> megamlm.training.step",
        "megamlm.parallel.b -> megamlm.training.step"]
