"""The build's one C extension (the CRI list reader); everything else is in pyproject.toml.

It is optional: where it cannot be compiled, podcache reads lists with protobuf's own decoder
(slower, same results).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "podcache.cri._wire",
            ["src/podcache/cri/_wire.c"],
            extra_compile_args=["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
