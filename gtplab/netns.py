"""Code that must run inside a network namespace, from one Python process.

setns(CLONE_NEWNET) moves only the calling thread, so each call runs in a helper thread that joins
the namespace and ends: the rest of the process stays where it is, while sockets, ifindex lookups and
BPF_PROG_RUN's ingress_ifindex inside `fn` see the namespace. (os.setns exists only from Python 3.12.)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from typing import Any, Callable

NETNS_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def enter(name: str | None) -> None:
    """Move the calling thread into network namespace `name` (None: stay)."""
    if not name:
        return
    fd = os.open(os.path.join(NETNS_DIR, name), os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"Couldn't enter netns {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


def run_in(name: str | None, fn: Callable[..., Any], *args, **kwargs) -> Any:
    """fn(*args, **kwargs) in a thread that has joined netns `name`; its result, or its exception."""
    box: dict[str, Any] = {}

    def body():
        try:
            enter(name)
            box["result"] = fn(*args, **kwargs)
        except BaseException as e:  # handed to the caller
            box["error"] = e

    t = threading.Thread(target=body, name=f"netns-{name}")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("result")
