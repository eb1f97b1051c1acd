#!/usr/bin/env python3
"""Write a one-layer OCI image-layout tar around a static busybox (stdlib only, no registry).

Used by scripts/containerd-up to make the test images (``localhost/pause:test`` with entrypoint
``sleep infinity``, ``localhost/busybox:test``) that ``ctr images import`` loads into containerd.
The output is reproducible: every timestamp is zero and every JSON document has sorted keys,
so the same busybox and arguments always give the same image digests. It deliberately builds
nothing else (no compression, no multi-layer images, no multi-platform indexes).

    mkimage.py BUSYBOX OUT.tar NAME --entrypoint '["/bin/sleep","infinity"]' [--cmd '["/bin/sh"]']
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
from typing import Any

DIRS = ("bin", "dev", "etc", "proc", "sys", "tmp", "root", "var", "run")
FILES = (
    ("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"),
    ("etc/group", b"root:x:0:\nnogroup:x:65534:\n"),
)
ENV_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GOARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le"}
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar"


def _info(path: str, kind: bytes, mode: int, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.type = kind
    info.mode = mode
    info.size = size
    info.linkname = link
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _add_file(tar: tarfile.TarFile, path: str, data: bytes, mode: int = 0o644) -> None:
    tar.addfile(_info(path, tarfile.REGTYPE, mode, len(data)), io.BytesIO(data))


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _json(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def build_layer(busybox: str) -> bytes:
    """The root filesystem: busybox, one symlink per applet, /etc/passwd and /etc/group."""
    applets = subprocess.run(
        [busybox, "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    with open(busybox, "rb") as f:
        binary = f.read()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in DIRS:
            tar.addfile(_info(d, tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755))
        _add_file(tar, "bin/busybox", binary, 0o755)
        for applet in sorted(set(applets) - {"busybox"}):
            tar.addfile(_info("bin/" + applet, tarfile.SYMTYPE, 0o777, link="busybox"))
        for path, data in FILES:
            _add_file(tar, path, data)
    return buf.getvalue()


def build_image(
    busybox: str, out: str, name: str, entrypoint: list[str], cmd: list[str] | None
) -> str:
    """Write the OCI layout tar to ``out``; return the image (config) digest."""
    arch = GOARCH.get(platform.machine(), platform.machine())
    layer = build_layer(busybox)
    config: dict[str, Any] = {"Env": [ENV_PATH], "Entrypoint": entrypoint, "WorkingDir": "/"}
    if cmd is not None:
        config["Cmd"] = cmd
    config_blob = _json(
        {
            "architecture": arch,
            "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
        }
    )
    manifest_blob = _json(
        {
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": {
                "mediaType": MT_CONFIG,
                "digest": _digest(config_blob),
                "size": len(config_blob),
            },
            "layers": [{"mediaType": MT_LAYER, "digest": _digest(layer), "size": len(layer)}],
        }
    )
    index_blob = _json(
        {
            "schemaVersion": 2,
            "mediaType": MT_INDEX,
            "manifests": [
                {
                    "mediaType": MT_MANIFEST,
                    "digest": _digest(manifest_blob),
                    "size": len(manifest_blob),
                    "platform": {"architecture": arch, "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                    },
                }
            ],
        }
    )
    tmp = out + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            tar.addfile(_info(d, tarfile.DIRTYPE, 0o755))
        _add_file(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add_file(tar, "index.json", index_blob)
        for blob in (layer, config_blob, manifest_blob):
            _add_file(tar, "blobs/sha256/" + _digest(blob)[len("sha256:") :], blob)
    os.replace(tmp, out)
    return _digest(config_blob)


def _json_list(text: str) -> list[str]:
    value = json.loads(text)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise argparse.ArgumentTypeError(f"expected a JSON list of strings, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("busybox", help="path to a static busybox binary")
    parser.add_argument("out", help="the OCI layout tar to write")
    parser.add_argument("name", help="image name, e.g. localhost/busybox:test")
    parser.add_argument("--entrypoint", type=_json_list, default=[], help="JSON list")
    parser.add_argument("--cmd", type=_json_list, default=None, help="JSON list")
    args = parser.parse_args(argv)
    digest = build_image(args.busybox, args.out, args.name, args.entrypoint, args.cmd)
    print(f"{args.name} {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
