"""The sandbox's canary: a candidate that tries every known way out and says what it reached.

Run as a replay's ``train.py`` would be (``python train.py --request <state>/request.json``,
inside the sandbox, by :mod:`.selftest`), with the standard library only. The request names the
targets; the canary writes ``<state>/canary.json``: one entry per attempt, ``{"escape", "target",
"blocked", "detail"}``. The escapes it tries (:data:`ESCAPES`):

* ``final_by_path``: read the final split's files and list its folders by their real paths;
* ``final_through_proc``: the same files through ``/proc``: every visible process's ``root``
  and ``cwd`` links, its open file descriptors, and every mount ``/proc/self/mountinfo``
  lists whose source or mount point lies in the final split;
* ``copy_outside``: copies of the final split outside the working directory: the self-test's
  planted ones by path, and any file anywhere under the standard places (a sibling checkout,
  ``/srv``, ``/var/tmp``, ``/opt``, ``/mnt``, ``/data``, ``/scratch``, ``/home``, the
  ``$HF_HOME``/``$HF_DATASETS_CACHE`` caches, ...) whose size and first 64 KiB match a final file;
* ``final_package_data``: the package data a final split is drawn from (e.g. scikit-learn's
  ``digits.csv.gz``), found by import inside the sandbox and by its host paths;
* ``write_outside``: open a file of the frozen package for writing, create a file in the frozen
  package, the working directory, the workspace, the public split and the fixed start;
* ``network``: TCP to the self-test's listener on the host's loopback, TCP and UDP to an outside
  address, a DNS lookup;
* ``host_unix_socket``: connect to the self-test's Unix socket listener (a path and an abstract
  name) and to the usual host sockets (Docker, D-Bus, X11, systemd);
* ``memory_limit`` / ``file_size_limit``: allocate past the memory limit (``malloc``, nothing
  touched), write one byte past the file-size limit (a sparse file): each must fail.

An attempt is *blocked* when it raised, read nothing, or read bytes that match no final file.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import os
import socket
import sys

HEAD_BYTES = 64 * 1024  # a file's fingerprint: its size and the SHA-256 of its first bytes
MAX_WALK = 20_000  # entries looked at per standard place
MAX_PIDS = 64  # processes looked through (a sandbox shows 2 or 3; without one, the host's first)
ESCAPES = (
    "final_by_path",
    "final_through_proc",
    "copy_outside",
    "final_package_data",
    "write_outside",
    "network",
    "host_unix_socket",
    "memory_limit",
    "file_size_limit",
)


def head_print(path: str) -> list:
    """``[size, sha256 of the first HEAD_BYTES]`` of a regular file."""
    with open(path, "rb") as f:
        head = f.read(HEAD_BYTES)
        size = os.fstat(f.fileno()).st_size
    return [size, hashlib.sha256(head).hexdigest()]


class Canary:
    """The attempts of one run, against ``request`` (see :mod:`.selftest`)."""

    def __init__(self, request: dict):
        self.request = request
        self.prints = {tuple(p) for p in request["final_prints"]}
        self.sizes = {p[0] for p in self.prints}
        self.attempts: list[dict] = []

    def note(self, escape: str, target: str, blocked: bool, detail: str) -> None:
        self.attempts.append({"escape": escape, "target": target, "blocked": blocked, "detail": detail[:300]})

    def read(self, escape: str, path: str, by_path: bool = False) -> None:
        """Try to read ``path``; escaped when bytes of a final file came back (``by_path``: any
        byte at all, the path being a final file's own)."""
        try:
            if os.path.isdir(path):
                entries = os.listdir(path)
                self.note(escape, path, not entries, f"listed {len(entries)} entries: {entries[:5]}")
                return
            found = head_print(path)
        except OSError as exc:
            self.note(escape, path, True, f"{type(exc).__name__}: {exc.strerror or exc}")
            return
        leaked = found[0] > 0 if by_path else tuple(found) in self.prints
        self.note(escape, path, not leaked, f"read {found[0]} bytes" + (" of a final file" if leaked else ""))

    def final_by_path(self) -> None:
        for path in self.request["final_files"] + self.request["final_dirs"]:
            self.read("final_by_path", path, by_path=True)

    def final_through_proc(self) -> None:
        pids = sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int)[:MAX_PIDS]
        for path in self.request["final_files"]:
            for pid in ["self", *pids]:
                self.read("final_through_proc", f"/proc/{pid}/root{path}", by_path=True)
                try:
                    cwd = os.readlink(f"/proc/{pid}/cwd")
                except OSError:
                    continue
                self.read("final_through_proc", f"/proc/{pid}/cwd/{os.path.relpath(path, cwd)}", by_path=True)
        for pid in pids:
            for fd in _listdir(f"/proc/{pid}/fd"):
                self.read_fd(f"/proc/{pid}/fd/{fd}")
        self.mounts()

    def read_fd(self, link: str) -> None:
        try:
            target = os.readlink(link)
        except OSError:
            return
        finals = self.request["final_files"] + self.request["final_dirs"] + self.request["package_data_files"]
        if any(_inside(target, f) for f in finals):
            self.read("final_through_proc", link, by_path=True)

    def mounts(self) -> None:
        """Every mount whose source (the bound host path) or mount point lies in the final split."""
        finals = self.request["final_files"] + self.request["final_dirs"] + self.request["package_data_files"]
        try:
            lines = open("/proc/self/mountinfo").read().splitlines()
        except OSError as exc:
            self.note("final_through_proc", "/proc/self/mountinfo", True, f"unreadable: {exc}")
            return
        hits = 0
        for line in lines:
            fields = line.split()
            root, point = fields[3], fields[4]
            if any(_inside(root, f) or _inside(point, f) for f in finals):
                hits += 1
                self.read("final_through_proc", point, by_path=True)
        self.note("final_through_proc", "/proc/self/mountinfo", True, f"{len(lines)} mounts, {hits} on final paths")

    def copy_outside(self) -> None:
        for path in self.request["copies"]:
            self.read("copy_outside", path)
        for place in self.request["search"]:
            found = self.walk(place)
            self.note("copy_outside", place, not found, f"copies found: {found[:3]}" if found else "no copy found")

    def walk(self, top: str) -> list[str]:
        """Files under ``top`` whose fingerprint is a final file's (at most MAX_WALK entries)."""
        found, seen = [], 0
        for folder, dirs, files in os.walk(top, onerror=lambda _: None):
            for name in files:
                seen += 1
                path = os.path.join(folder, name)
                try:
                    if os.path.getsize(path) in self.sizes and tuple(head_print(path)) in self.prints:
                        found.append(path)
                except OSError:
                    pass
            if seen + len(dirs) > MAX_WALK:
                break
        return found

    def final_package_data(self) -> None:
        for package, rel in self.request["package_data"]:
            try:
                spec = importlib.util.find_spec(package)
            except (ImportError, ValueError) as exc:
                self.note("final_package_data", package, True, f"not importable: {exc}")
                continue
            if spec is None or not spec.origin:
                self.note("final_package_data", package, True, "not importable")
                continue
            self.read("final_package_data", os.path.join(os.path.dirname(spec.origin), rel))
        for path in self.request["package_data_files"]:
            self.read("final_package_data", path)

    def write_outside(self) -> None:
        for path in self.request["frozen_files"]:
            self.try_write(path, "r+b")
        for folder in self.request["read_only_dirs"]:
            self.try_write(os.path.join(folder, ".canary-was-here"), "xb")

    def try_write(self, path: str, mode: str) -> None:
        try:
            with open(path, mode):
                pass
        except OSError as exc:
            self.note("write_outside", path, True, f"{type(exc).__name__}: {exc.strerror or exc}")
            return
        if mode == "xb":
            os.unlink(path)
        self.note("write_outside", path, False, f"opened for writing ({mode})")

    def network(self) -> None:
        for host, port in self.request["tcp"]:
            self.connect("network", (socket.AF_INET, socket.SOCK_STREAM), (host, port), f"tcp://{host}:{port}")
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b"\0", ("8.8.8.8", 53))
            self.note("network", "udp://8.8.8.8:53", False, "datagram sent")
        except OSError as exc:
            self.note("network", "udp://8.8.8.8:53", True, f"{type(exc).__name__}: {exc.strerror or exc}")
        for name in self.request["dns"]:
            try:
                addresses = {a[4][0] for a in socket.getaddrinfo(name, 443)}
            except OSError as exc:
                self.note("network", f"dns:{name}", True, f"{type(exc).__name__}: {exc}")
                continue
            outside = sorted(a for a in addresses if not a.startswith("127.") and a != "::1")
            self.note("network", f"dns:{name}", not outside, f"resolved to {sorted(addresses)}")

    def connect(self, escape: str, kind: tuple, address, target: str) -> None:
        """A connection that was made is an escape, whether or not the message then went through:
        a listener may accept and close first (a Unix socket then refuses the send at once,
        BrokenPipeError), and that is the host answering."""
        try:
            with socket.socket(*kind) as s:
                s.settimeout(3)
                s.connect(address)
                try:
                    s.sendall(b"canary\n")
                    detail = "connected and sent a message"
                except OSError as exc:
                    detail = f"connected; the listener closed before the message ({type(exc).__name__})"
        except OSError as exc:
            self.note(escape, target, True, f"{type(exc).__name__}: {exc.strerror or exc}")
            return
        self.note(escape, target, False, detail)

    def host_unix_socket(self) -> None:
        unix = (socket.AF_UNIX, socket.SOCK_STREAM)
        for path in self.request["unix_sockets"] + self.request["well_known_sockets"]:
            self.connect("host_unix_socket", unix, path, path)
        for name in self.request["abstract_sockets"]:
            self.connect("host_unix_socket", unix, "\0" + name, f"@{name}")

    def limits(self) -> None:
        limits = self.request["limits"]
        if limits.get("memory_bytes"):
            libc = ctypes.CDLL(None)
            libc.malloc.restype = ctypes.c_void_p
            want = limits["memory_bytes"] + 64 * 1024**2
            block = libc.malloc(ctypes.c_size_t(want))  # untouched: no page is used even if it works
            libc.free(ctypes.c_void_p(block))
            self.note("memory_limit", f"malloc({want})", not block, "refused" if not block else "allocated")
        if limits.get("file_bytes"):
            path = os.path.join(self.request["state_dir"], "canary-sparse")
            try:
                with open(path, "wb") as f:
                    f.seek(limits["file_bytes"])
                    f.write(b"x")
                    f.flush()
                self.note("file_size_limit", path, False, f"wrote past {limits['file_bytes']} bytes")
            except OSError as exc:
                self.note("file_size_limit", path, True, f"{type(exc).__name__}: {exc.strerror or exc}")
            finally:
                _unlink(path)

    def run(self) -> list[dict]:
        for name in ESCAPES[:-2]:
            try:
                getattr(self, name)()
            except Exception as exc:  # an attempt that crashes is recorded, the rest still run
                self.note(name, "-", True, f"the attempt itself failed: {type(exc).__name__}: {exc}")
        self.limits()
        return self.attempts


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def main(argv: list[str]) -> int:
    """``canary.py --request <state>/request.json``: run, write ``<state>/canary.json``."""
    request = json.load(open(argv[argv.index("--request") + 1]))
    attempts = Canary(request).run()
    with open(os.path.join(request["state_dir"], "canary.json"), "w") as f:
        json.dump({"attempts": attempts, "pid": os.getpid(), "uid": os.getuid()}, f, indent=1)
    print(f"[canary] {len(attempts)} attempts, {sum(not a['blocked'] for a in attempts)} escaped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
