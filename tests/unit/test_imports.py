"""Layering rules that keep the package simple: imports inside functions only for optional dependencies."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "megamlm"
# Optional extras (or expensive GPU-only paths) that must never be needed to import megamlm.
OPTIONAL = ("transformers", "datasets", "huggingface_hub", "matplotlib", "tiktoken", "sentencepiece", "zstandard",
            "pyarrow", "flash_attn", "transformer_engine", "apex", "mpi4py", "gguf", "triton", "torchao",
            "torch.nn.attention.flex_attention", "accelerate", "seqeval")


def function_level_imports():
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.ImportFrom) and sub.module:
                        yield path, sub.lineno, sub.module
                    elif isinstance(sub, ast.Import):
                        for alias in sub.names:
                            yield path, sub.lineno, alias.name


def test_only_optional_dependencies_are_imported_inside_functions():
    offending = [f"{path.relative_to(PACKAGE.parent)}:{line} {module}" for path, line, module in function_level_imports()
                 if not module.startswith(OPTIONAL)]
    assert offending == []
