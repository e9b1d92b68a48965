"""Downloads: resume with Range, checksum failures set aside, clear offline errors."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import pytest
from equibench.datasets.download import (
    ChecksumError,
    InterruptedDownload,
    OfflineError,
    RemoteFile,
    download,
)

PAYLOAD = bytes(range(256)) * 4000  # 1 MB: several read chunks


def _remote(server_url: str, path: str, data: bytes, **kw: object) -> RemoteFile:
    md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
    return RemoteFile(url=server_url + path, md5=md5, filename=Path(path).name, **kw)


def test_download_verifies_and_writes_atomically(file_server, tmp_path):
    file_server.files["/a.bin"] = PAYLOAD
    path = download(_remote(file_server.url, "/a.bin", PAYLOAD), tmp_path, progress=False)
    assert path == tmp_path / "a.bin"
    assert path.read_bytes() == PAYLOAD
    assert not (tmp_path / "a.bin.part").exists()
    # A verified file is reused without another request.
    download(_remote(file_server.url, "/a.bin", PAYLOAD), tmp_path, progress=False)
    assert len(file_server.ranges) == 1


def test_checksum_mismatch_moves_file_aside(file_server, tmp_path):
    file_server.files["/b.bin"] = PAYLOAD[:-1] + b"X"  # corrupted on the server
    remote = _remote(file_server.url, "/b.bin", PAYLOAD)
    with pytest.raises(ChecksumError, match="moved aside"):
        download(remote, tmp_path, progress=False)
    assert not (tmp_path / "b.bin").exists()
    assert not (tmp_path / "b.bin.part").exists()
    assert (tmp_path / "b.bin.bad").read_bytes() == file_server.files["/b.bin"]
    # Fixed on the server: the next call starts afresh, never from the bad file.
    file_server.files["/b.bin"] = PAYLOAD
    assert download(remote, tmp_path, progress=False).read_bytes() == PAYLOAD
    assert file_server.ranges[-1] is None


def test_cut_transfer_resumes_from_partial_file(file_server, tmp_path):
    file_server.files["/c.bin"] = PAYLOAD
    file_server.cut_once.add("/c.bin")
    remote = _remote(file_server.url, "/c.bin", PAYLOAD)
    with pytest.raises(InterruptedDownload, match="resume"):
        download(remote, tmp_path, retries=0, progress=False)
    part = tmp_path / "c.bin.part"
    assert 0 < part.stat().st_size < len(PAYLOAD)
    assert not (tmp_path / "c.bin").exists()
    path = download(remote, tmp_path, retries=0, progress=False)
    assert path.read_bytes() == PAYLOAD
    assert file_server.ranges == [None, f"bytes={len(PAYLOAD) // 2}-"]


def test_retries_resume_within_one_call(file_server, tmp_path):
    file_server.files["/d.bin"] = PAYLOAD
    file_server.cut_once.add("/d.bin")
    path = download(_remote(file_server.url, "/d.bin", PAYLOAD), tmp_path, progress=False)
    assert path.read_bytes() == PAYLOAD
    assert file_server.ranges[1] == f"bytes={len(PAYLOAD) // 2}-"


def test_complete_partial_file_is_verified_not_refetched(file_server, tmp_path):
    file_server.files["/e.bin"] = PAYLOAD
    (tmp_path / "e.bin.part").write_bytes(PAYLOAD)
    path = download(_remote(file_server.url, "/e.bin", PAYLOAD), tmp_path, progress=False)
    assert path.read_bytes() == PAYLOAD
    assert file_server.ranges == [f"bytes={len(PAYLOAD)}-"]  # answered 416


def test_offline_error_names_the_alternative(tmp_path):
    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    remote = RemoteFile(
        url=f"http://127.0.0.1:{port}/x.tar", md5="0" * 32, filename="x.tar",
        offline_hint="`--source qm9pack`",
    )  # fmt: skip
    with pytest.raises(OfflineError, match="Offline alternative: `--source qm9pack`"):
        download(remote, tmp_path, timeout=2, progress=False)
