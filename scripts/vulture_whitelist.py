# Names vulture (scripts/test, `vulture` reads [tool.vulture] in pyproject.toml) reports as
# unused that must stay: parameters whose callers pass them whatever the body reads. Not a module:
# vulture reads it as source, nothing imports it (ruff skips it: bare names on purpose).

# __exit__(self, exc_type, exc, tb): the context-manager protocol passes all three.
exc_type
tb

# signal handlers are called as handler(signum, frame).
frame

# grpc's check_connectivity_state(try_to_connect) signature, kept by its stand-in lambda.
try_to_connect

# pytest fixtures imported into a test module so that they apply there (autouse, by name).
entry_point
