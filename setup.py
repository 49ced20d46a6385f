"""Builds the optional C++ index helper (csrc/ -> megamlm.data._helpers); metadata is in pyproject.toml.

Without a C++ compiler the build skips the extension and megamlm uses its numpy builders,
which produce the same arrays.
"""

import sys

from setuptools import Extension, setup

compile_args = ["/O2"] if sys.platform == "win32" else ["-O3", "-std=c++17"]

setup(
    ext_modules=[
        Extension(
            "megamlm.data._helpers",
            sources=["csrc/data_helpers.cpp"],
            language="c++",
            extra_compile_args=compile_args,
            optional=True,
        )
    ]
)
