"""A tool the lab runs but the repo does not hold (a third-party UPF's runtime, like TRex's): a
directory, or a release tarball unpacked once into a cache.

    d = runtime.resolve("../shared/eupf/eupf-a8d774a-runtime.tgz", env="GTPLAB_EUPF_TARBALL",
                        what="eUPF")          # the folder to run it from

Where it is looked for: $env when set (the user's choice wins over a lab config's default), else the
source given (a lab config's `dut.external.runtime`, resolved against the config's folder). A tarball
is unpacked into the cache ($GTPLAB_CACHE, default /var/cache/gtplab, as TRex's in
gtplab/lab/trex_server.py) in a directory named after it and the first 16 hex digits of its sha256,
atomically (unpacked beside, then renamed): every lab and test shares one copy, a changed tarball
gets a directory of its own, and nothing is written into the repo. A tarball (or directory) whose
only entry is one folder is that folder (eUPF's: eupf-a8d774a/; Open5GS's UPF: open5gs-8f25f3b/).

Used by gtplab.lab.external (the external UPF's runtime, `{runtime}` in its command and config).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Callable

from gtplab.errors import UserError

DEFAULT_CACHE = "/var/cache/gtplab"


class RuntimeUnavailable(UserError):
    """No runtime where it was looked for (the message says where, and how to give one)."""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _top(d: Path) -> Path:
    """d, or its only entry when that is a folder (a release's top folder)."""
    entries = [e for e in d.iterdir() if not e.name.startswith(".")]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else d


def unpack(tgz: Path, cache: str | os.PathLike | None = None,
           find: Callable[[Path], Path | None] = _top, holds: str = "",
           error: type[UserError] = RuntimeUnavailable) -> Path:
    """The tarball unpacked into the cache (once; reused while its sha256 is the same): find() of the
    unpacked tree (the folder to run from). A tarball whose tree find() rejects (None) is an error
    naming what it lacks (`holds`), and nothing is left in the cache."""
    cache = Path(cache or os.environ.get("GTPLAB_CACHE") or DEFAULT_CACHE)
    stem = tgz.name.removesuffix(".tgz").removesuffix(".tar.gz")
    dest = cache / f"{stem}-{sha256(tgz)[:16]}"
    if dest.is_dir() and (found := find(dest)):
        return found
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=cache))
    try:
        try:
            with tarfile.open(tgz) as t:
                if hasattr(tarfile, "data_filter"):
                    t.extractall(tmp, filter="tar")
                else:
                    t.extractall(tmp)
        except (tarfile.TarError, OSError) as e:
            raise error(f"Couldn't unpack {tgz}: {e}") from None
        if not find(tmp):
            raise error(f"{tgz} holds no {holds or 'usable tree'}")
        try:
            os.rename(tmp, dest)
        except OSError:             # another process was faster
            if not (dest.is_dir() and find(dest)):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return find(dest)


def resolve(source: str | os.PathLike | None, env: str | None = None, what: str = "the tool",
            cache: str | os.PathLike | None = None) -> Path:
    """The folder to run the tool from: $env if set, else source; a directory as it is, a tarball
    unpacked into the cache. RuntimeUnavailable (one line: where it looked, how to give one)."""
    from_env = os.environ.get(env) if env else None
    src = from_env or source
    how = (f"set ${env} or dut.external.runtime in the lab config" if env
           else "set dut.external.runtime in the lab config")
    if not src:
        raise RuntimeUnavailable(f"no {what} runtime given: {how}")
    p = Path(os.path.expanduser(str(src)))
    if p.is_dir():
        return _top(p)
    if p.is_file():
        return unpack(p, cache)
    where = f"${env}" if from_env else "dut.external.runtime"
    raise RuntimeUnavailable(f"no {what} runtime: {p} ({where}) does not exist; {how}")
