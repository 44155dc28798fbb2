"""Copy files into and out of a running rental (`suanli cp`, as `kubectl cp`): a tar stream carried by an
attached command, `tar -x` or `tar -c` on the node, run as the workload runs (its user, its working
directory for relative paths, its container for an image), so the rental needs `tar`, as kubectl cp's pods
do. The command's stdout is the archive and its stderr comes apart (`separate_stderr`): tar's errors, said
when it fails.
What is written here is extracted with tarfile's `data` filter: nothing lands outside the target, and no
device, setuid bit or link out of it is made."""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection

from suanli.client.client import Client
from suanli.client.streams import END_OF_INPUT, READ_BYTES, STDERR, output_stream
from suanli.wire.schemas import ExecResponse

# sh -c SCRIPT sh DEST NAME: the archive's one top entry NAME becomes DEST (or goes into it, a directory)
UNPACK = """case $1 in */) mkdir -p -- "$1" || exit 1;; esac
if [ -d "$1" ]; then
  tar -xf - --no-same-owner -C "$1"
else
  parent=$(dirname -- "$1")
  mkdir -p -- "$parent" && stage=$(mktemp -d "$parent/.suanli-cp.XXXXXX") || exit 1
  trap 'rm -rf -- "$stage"; exit 129' HUP TERM
  tar -xf - --no-same-owner -C "$stage" && mv -f -- "$stage/$2" "$1"
  status=$?
  rm -rf -- "$stage"
  exit $status
fi"""
# sh -c SCRIPT sh SOURCE: a directory archived as `.` (its contents), a file by its name
PACK = """if [ ! -e "$1" ]; then echo "no such file or directory" >&2; exit 2; fi
if [ -d "$1" ]; then
  cd -- "$1" && tar -cf - .
else
  cd -- "$(dirname -- "$1")" && tar -cf - -- "$(basename -- "$1")"
fi"""
ERROR_BYTES = 4096  # of the node's stderr kept for the message


class CopyError(Exception):
    """The copy failed: the message says why (the node's tar, or this side)."""


@dataclass(frozen=True, slots=True)
class RemotePath:
    """`RENTAL:PATH`: a path in a rental (relative: to its working directory)."""

    rental_id: str
    path: str

    @classmethod
    def parse(cls, text: str) -> RemotePath | None:
        """`RENTAL:PATH` as a remote path; None for a local one (no colon, or a slash before the first)."""
        rental_id, colon, path = text.partition(":")
        if not colon or not rental_id or "/" in rental_id:
            return None
        return cls(rental_id, path)

    def __str__(self) -> str:
        return f"{self.rental_id}:{self.path}"


def upload(
    client: Client,
    local: Path,
    remote: RemotePath,
    *,
    node_rank: int = 0,
    timeout_s: int = 3600,
    on_bytes: Callable[[int], None] | None = None,
) -> None:
    """Copy the file or directory `local` to `remote` (into it, when it is a directory there; `on_bytes`:
    archive bytes sent so far); CopyError when it fails."""
    if not remote.path:
        raise CopyError(f"{remote}: give the path to copy to (`.` for the rental's working directory)")
    if not local.exists():
        raise CopyError(f"{local}: no such file or directory")
    name = local.resolve().name or "root"
    command = ["sh", "-c", UNPACK, "sh", remote.path, name]
    queued = _queue(client, remote, command, node_rank, timeout_s)
    with client.attach_exec(remote.rental_id, queued.id) as socket:
        stream = _FrameReader(socket, None)
        sink = _FrameWriter(socket, on_bytes)
        with contextlib.suppress(ConnectionClosed):  # it ended early: its exit code and errors say why
            try:
                with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as archive:
                    archive.add(local, arcname=name)
            except OSError as error:  # unreadable here: the command on the node is hung up as this goes
                raise CopyError(
                    f"{local}: {error.strerror or error}: {error.filename or ''}".rstrip(": ")
                ) from None
            sink.flush()
            socket.send(END_OF_INPUT)
        stream.drain()  # its output and errors until it ends (ended early: those that came before)
    _check(client, remote, queued.id, stream.errors)


def download(
    client: Client,
    remote: RemotePath,
    local: Path,
    *,
    node_rank: int = 0,
    timeout_s: int = 3600,
    on_bytes: Callable[[int], None] | None = None,
) -> None:
    """Copy `remote`'s file or directory to `local` (into it by its name, when `local` is a directory here
    and `remote` is not the rental's working directory, `/` or a `..`: their contents go into `local`);
    CopyError when it fails."""
    source = remote.path.rstrip("/") or remote.path
    if not source:
        raise CopyError(f"{remote}: give the path to copy from (`.` for the rental's working directory)")
    local = local.absolute()
    name = PurePosixPath(source).name  # "" for `.` and `/`
    if local.is_dir() and name not in ("", ".."):
        parent, target = local, name
    else:
        parent, target = local.parent, local.name
    if not parent.is_dir():
        raise CopyError(f"{local}: no directory {parent} to copy into")
    command = ["sh", "-c", PACK, "sh", source]
    queued = _queue(client, remote, command, node_rank, timeout_s)
    broken: Exception | None = None
    with client.attach_exec(remote.rental_id, queued.id) as socket:
        socket.send(END_OF_INPUT)
        stream = _FrameReader(socket, on_bytes)
        try:
            extract(stream, parent, name, target)
        except (tarfile.TarError, CopyError, OSError) as error:
            broken = error
        stream.drain()
    _check(client, remote, queued.id, stream.errors)
    if broken is not None:
        raise CopyError(f"{remote}: {broken}")


def extract(stream: IO[bytes], parent: Path, name: str, target: str) -> None:
    """Extract the tar `stream` into `parent` as `target`: a directory's (`.`, its contents) or the file
    `name`'s; with tarfile's `data` filter, which refuses a member that would land outside `parent`, a
    device, or a link out of it."""
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        for member in archive:
            member.name = _renamed(member.name, name, target)
            if member.islnk():  # a hard link names another member
                member.linkname = _renamed(member.linkname, name, target)
            if member.isfile() and member.name == target:
                _extract_whole(archive, member, parent)
            else:
                archive.extract(member, parent, filter="data")


def _extract_whole(archive: tarfile.TarFile, member: tarfile.TarInfo, parent: Path) -> None:
    """Extract the copied file beside its target, then put it in place: a copy cut off midway (its rental
    stopped) leaves an earlier local copy whole, not overwritten by the part that came."""
    final = member.name
    member.name = f".{final}.suanli-cp-{secrets.token_hex(4)}"
    staged = parent / member.name
    try:
        archive.extract(member, parent, filter="data")
        os.replace(staged, parent / final)
    finally:
        staged.unlink(missing_ok=True)


def _renamed(member: str, name: str, target: str) -> str:
    """A member of a directory's archive (`.`, `./...`) or of the file `name`'s, as one of `target`."""
    if member in (".", "./") or (name and member == name):
        return target
    if member.startswith("./"):
        return f"{target}/{member[2:]}"
    raise CopyError(f"the archive holds {member!r}, not the copied path")


def _queue(
    client: Client, remote: RemotePath, command: list[str], node_rank: int, timeout_s: int
) -> ExecResponse:
    """The copy's command, attached, its stderr apart from the archive."""
    return client.exec(
        remote.rental_id,
        command,
        node_rank=node_rank,
        timeout_s=timeout_s,
        stdin=True,
        separate_stderr=True,
    )


def _check(client: Client, remote: RemotePath, exec_id: str, errors: str) -> None:
    """CopyError with the node's errors (its stderr) when the command did not exit 0."""
    ended = client.wait_exec(remote.rental_id, exec_id)
    if ended.state == "exited" and ended.exit_code == 0:
        return
    reason = errors.strip() or ended.message or f"tar exited with code {ended.exit_code}"
    raise CopyError(f"{remote}: {_tar_said(reason)}")


def _tar_said(text: str) -> str:
    """The node's error lines, without tar's closing `Exiting with failure status` line."""
    lines = [line for line in text.splitlines() if line and "Exiting with failure status" not in line]
    return "; ".join(lines) or text


class _FrameWriter(io.RawIOBase):
    """Bytes written here go to the socket as binary frames of up to `READ_BYTES`."""

    def __init__(self, socket: ClientConnection, on_bytes: Callable[[int], None] | None) -> None:
        self.socket, self.on_bytes = socket, on_bytes
        self.pending = bytearray()
        self.sent = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.pending += data
        while len(self.pending) >= READ_BYTES:
            self._send(bytes(self.pending[:READ_BYTES]))
            del self.pending[:READ_BYTES]
        return len(data)

    def flush(self) -> None:
        if self.pending:
            self._send(bytes(self.pending))
            self.pending.clear()

    def _send(self, frame: bytes) -> None:
        self.socket.send(frame)
        self.sent += len(frame)
        if self.on_bytes is not None:
            self.on_bytes(self.sent)


class _FrameReader(io.RawIOBase):
    """The command's stdout, from the socket's binary frames, as a stream of bytes; the first `ERROR_BYTES`
    of its stderr kept apart (`errors`)."""

    def __init__(self, socket: ClientConnection, on_bytes: Callable[[int], None] | None) -> None:
        self.frames: Iterator[str | bytes] = iter(socket)
        self.on_bytes = on_bytes
        self.buffer = b""
        self.received = 0
        self.stderr = bytearray()

    @property
    def errors(self) -> str:
        return self.stderr.decode(errors="replace")

    def readable(self) -> bool:
        return True

    def readinto(self, target: memoryview) -> int:  # type: ignore[override]
        while not self.buffer:
            try:
                frame = next(self.frames)
            except (StopIteration, ConnectionClosed):
                return 0
            if not isinstance(frame, bytes) or (marked := output_stream(frame)) is None:
                continue
            stream, data = marked
            if stream == STDERR:
                self.stderr += data[: max(0, ERROR_BYTES - len(self.stderr))]
                continue
            self.buffer = data
            self.received += len(data)
            if self.on_bytes is not None:
                self.on_bytes(self.received)
        count = min(len(target), len(self.buffer))
        target[:count] = self.buffer[:count]
        self.buffer = self.buffer[count:]
        return count

    def drain(self) -> None:
        """Read to the end, so the command's end is not cut short by this side going."""
        scratch = memoryview(bytearray(READ_BYTES))
        while self.readinto(scratch):
            pass
