"""The ``podcache`` commands, one module each; the group that mounts them is ``podcache.cli.app``.

Each module imports only click and the CLI's option helpers at import time (gRPC, rich and YAML
are imported when a command runs), so ``podcache --help`` stays fast.
"""
