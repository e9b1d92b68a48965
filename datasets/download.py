"""Resumable, checksum-verified downloads with the standard library only.

Protocol for one file ``dest``:

1. bytes arrive in ``dest.part``; when it already exists (an earlier transfer was cut)
   the request asks for the rest with an HTTP ``Range`` header and appends;
2. the complete ``.part`` file is checked against the published md5;
3. a match is moved onto ``dest`` with ``os.replace`` (atomic); a mismatch is moved
   aside to ``dest.bad`` and never read again, and :class:`ChecksumError` is raised.

A file already at ``dest`` is verified again before it is trusted. When the host
cannot be reached, :class:`OfflineError` names the offline alternative.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class RemoteFile:
    """A published file: where it is, what it must hash to, and what to call it locally.

    ``offline_hint`` is shown when the host cannot be reached, e.g.
    ``"--source qm9pack"``; ``size`` (bytes) is optional and only used for the
    progress bar when the server does not say.
    """

    url: str
    md5: str
    filename: str
    size: int | None = None
    offline_hint: str = ""


class DownloadError(RuntimeError):
    """A download did not produce a verified file."""


class OfflineError(DownloadError):
    """The host could not be reached at all."""


class ChecksumError(DownloadError):
    """The downloaded bytes do not match the published md5 (file moved to ``*.bad``)."""


class InterruptedDownload(DownloadError):
    """The transfer stopped early; the partial file is kept and the next call resumes."""


def md5sum(path: Path) -> str:
    """Hex md5 of a file, read in 1 MiB chunks."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(
    remote: RemoteFile,
    dest_dir: Path,
    *,
    retries: int = 3,
    timeout: float = 60.0,
    progress: bool = True,
) -> Path:
    """Download ``remote`` into ``dest_dir`` and return the verified file's path.

    ``retries`` extra attempts resume a cut transfer within this call; with
    ``retries=0`` a cut transfer raises :class:`InterruptedDownload` and the next
    call resumes from the ``.part`` file.
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / remote.filename
    if dest.exists():
        if md5sum(dest) == remote.md5:
            return dest
        # A file we did not verify (copied by hand, or changed since): set it aside.
        os.replace(dest, dest.with_name(dest.name + ".bad"))
    part = dest.with_name(dest.name + ".part")
    for attempt in range(retries + 1):
        try:
            _fetch(remote, part, timeout=timeout, progress=progress)
            break
        except InterruptedDownload:
            if attempt == retries:
                raise
    return _verify_and_commit(remote, part, dest)


def _fetch(remote: RemoteFile, part: Path, *, timeout: float, progress: bool) -> None:
    """Bring ``part`` up to the full file, resuming from its current size."""
    offset = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(remote.url, headers={"User-Agent": "equibench"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code == 416 and offset:
            # Nothing left to send: the partial file is already complete.
            return
        raise DownloadError(f"{remote.url}: HTTP {err.code} {err.reason}") from err
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        hint = f" Offline alternative: {remote.offline_hint}." if remote.offline_hint else ""
        raise OfflineError(f"cannot reach {remote.url} ({reason}).{hint}") from err
    with response:
        if offset and response.status != 206:
            # The server ignored the Range header and sends everything: start over.
            offset = 0
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length is not None else remote.size
        mode = "ab" if offset else "wb"
        received = 0
        with (
            open(part, mode) as handle,
            tqdm(
                total=total,
                initial=offset,
                unit="B",
                unit_scale=True,
                desc=remote.filename,
                disable=not progress,
            ) as bar,
        ):
            try:
                for chunk in iter(lambda: response.read(CHUNK_BYTES), b""):
                    handle.write(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
            except (http.client.IncompleteRead, OSError) as err:
                raise InterruptedDownload(
                    f"{remote.url}: transfer cut after {offset + received} bytes; "
                    f"call again to resume from {part}"
                ) from err
        if length is not None and received < int(length):
            raise InterruptedDownload(
                f"{remote.url}: got {received} of {length} bytes; call again to resume"
            )


def _verify_and_commit(remote: RemoteFile, part: Path, dest: Path) -> Path:
    """Move a verified ``part`` onto ``dest``; move a corrupt one aside to ``dest.bad``."""
    actual = md5sum(part)
    if actual != remote.md5:
        bad = dest.with_name(dest.name + ".bad")
        os.replace(part, bad)
        raise ChecksumError(
            f"{remote.url}: md5 {actual} does not match the published {remote.md5}; "
            f"the file was moved aside to {bad} and will not be used"
        )
    os.replace(part, dest)
    return dest
