"""The build's two C extensions (the CRI list reader, the CRI socket's relay); everything else
is in pyproject.toml.

Both are optional: where they cannot be compiled, podcache reads lists with protobuf's own
decoder and relays the CRI socket on its event loop (slower, same results).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "podcache.cri._wire",
            ["src/podcache/cri/_wire.c"],
            extra_compile_args=["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        ),
        Extension(
            "podcache.serve.crisock._relay",
            [
                "src/podcache/serve/crisock/_relay.c",
                "src/podcache/serve/crisock/_hpack.c",
                "src/podcache/serve/crisock/_answers.c",
            ],
            depends=["src/podcache/serve/crisock/_h2.h"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        ),
    ]
)
