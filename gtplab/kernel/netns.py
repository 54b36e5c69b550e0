"""Code that must run inside a network namespace, from one Python process.

setns(CLONE_NEWNET) moves only the calling thread, so each call runs in a helper thread that joins
the namespace and ends: the rest of the process stays where it is, while sockets, ifindex lookups and
BPF_PROG_RUN's ingress_ifindex inside `fn` see the namespace. (os.setns exists only from Python 3.12.)

Used by gtplab.lab.topology (re-exported as run_in_netns), gtplab.kernel.libbpf, tests and bench/.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import queue
import subprocess
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


class Worker:
    """A thread that joins netns `name` once and then runs calls there, one at a time, until
    closed. For many short calls: run_in pays a new thread and a setns for each (about 25 ms here,
    most of it the thread's exit with its own namespace). Close it before deleting the netns: the
    thread holds it."""

    def __init__(self, name: str | None):
        self.name = name
        self._q: queue.Queue = queue.Queue()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name=f"netns-worker-{name}", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error:
            self._thread.join()
            raise self._error

    def _loop(self) -> None:
        try:
            enter(self.name)
        except BaseException as e:  # handed to the constructor
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        while (item := self._q.get()) is not None:
            fn, args, kwargs, box, done = item
            try:
                box["result"] = fn(*args, **kwargs)
            except BaseException as e:  # handed to the caller
                box["error"] = e
            done.set()

    def call(self, fn: Callable[..., Any], *args, **kwargs) -> Any:
        """fn(*args, **kwargs) in the namespace; its result, or its exception."""
        if not self._thread.is_alive():
            raise RuntimeError(f"the worker for netns {self.name} is closed")
        box: dict[str, Any] = {}
        done = threading.Event()
        self._q.put((fn, args, kwargs, box, done))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box.get("result")

    def close(self) -> None:
        if self._thread.is_alive():
            self._q.put(None)
            self._thread.join()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def route_problem(ns: str, addr: str, ifname: str) -> str | None:
    """Why addr is not reached from netns ns by ifname alone, or None when it is: the route to it
    must leave by ifname, and ns must have no default route (so that nothing addressed elsewhere
    can take a way out of the lab). Used for an external UPF's N4 (gtplab.lab.external, the PFCP
    DUT before its association)."""
    p = subprocess.run(["ip", "-n", ns, "-j", "route", "get", addr], capture_output=True, text=True, timeout=30)
    try:
        dev = (json.loads(p.stdout or "[]") or [{}])[0].get("dev") if p.returncode == 0 else None
    except ValueError:
        dev = None
    if dev != ifname:
        why = (p.stderr or "").strip()
        return (f"in {ns} the route to {addr} leaves by {dev or 'no interface'}{f' ({why})' if why else ''}, "
                f"not by the lab's link {ifname}")
    d = subprocess.run(["ip", "-n", ns, "-j", "route", "show", "default"], capture_output=True, text=True,
                       timeout=30)
    routes = json.loads(d.stdout or "[]") if d.returncode == 0 else []
    if routes:
        via = ", ".join(f"via {r.get('gateway', '?')} dev {r.get('dev', '?')}" for r in routes)
        return (f"{ns} has a default route ({via}): what is not addressed to the lab could leave the "
                "machine; this namespace holds the lab's link only")
    return None
