"""Unpack a Debian package's files without dpkg (a .deb is an ar archive holding data.tar.*).

Usage: python bench/unpack_deb.py PACKAGE.deb DEST   (as ``dpkg -x``; for machines without dpkg)

Reads ``data.tar.{gz,xz,bz2}`` (Debian's packages; Ubuntu's ``.zst`` needs Python 3.14's
tarfile) and extracts with tarfile's ``"tar"`` filter (Python >= 3.11.4 / 3.12), which
refuses absolute paths and links that leave ``DEST``.
"""

import io
import sys
import tarfile


def unpack(deb: str, dest: str) -> None:
    data = open(deb, "rb").read()
    pos = 8  # after the "!<arch>\n" magic
    while pos < len(data):
        name, size = data[pos : pos + 16].decode().strip().rstrip("/"), int(data[pos + 48 : pos + 58])
        body = data[pos + 60 : pos + 60 + size]
        if name.startswith("data.tar"):
            tarfile.open(fileobj=io.BytesIO(body)).extractall(dest, filter="tar")
        pos += 60 + size + (size & 1)


if __name__ == "__main__":
    unpack(sys.argv[1], sys.argv[2])
