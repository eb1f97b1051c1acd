"""``python -m podcache.serve``: the ``podcache serve`` command on its own; nothing else."""

from podcache.serve.command import serve_command

if __name__ == "__main__":
    serve_command(prog_name="podcache serve")
