"""gtplab.lab.trex_server without a TRex: where the runtime comes from and how a tarball is cached, and
the lab config keys that name it (no server started here; tests/trex/test_trex*.py run the real one)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from gtplab.errors import UserError
from gtplab.lab import config as labconfig
from gtplab.lab import trex_server


def make_tarball(path: Path, marker: bytes) -> Path:
    with tarfile.open(path, "w:gz") as t:
        for name, data, mode in (("scripts/t-rex-64", b"#!/bin/sh\n", 0o755), ("scripts/marker", marker, 0o644)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            t.addfile(info, io.BytesIO(data))
    return path


def test_tarball_unpacked_once_per_sha256(tmp_path):
    cache = tmp_path / "cache"
    a = make_tarball(tmp_path / "trex-a.tgz", b"one")
    d1 = trex_server.resolve(a, cache)
    assert (d1 / "t-rex-64").is_file() and d1.name == "scripts" and d1.parent.parent == cache
    assert d1.parent.name.startswith("trex-a-") and len(d1.parent.name) == len("trex-a-") + 16
    ino = os.stat(d1 / "marker").st_ino
    assert trex_server.resolve(a, cache) == d1 and os.stat(d1 / "marker").st_ino == ino   # reused
    make_tarball(a, b"two")                                   # same name, other content: its own dir
    d2 = trex_server.resolve(a, cache)
    assert d2 != d1 and (d2 / "marker").read_bytes() == b"two" and (d1 / "marker").read_bytes() == b"one"
    assert sorted(p.name for p in cache.iterdir()) == sorted([d1.parent.name, d2.parent.name])  # no temp left


def test_runtime_errors(tmp_path):
    with pytest.raises(trex_server.TrexUnavailable, match="does not exist"):
        trex_server.resolve(tmp_path / "nope.tgz", tmp_path)
    with pytest.raises(trex_server.TrexUnavailable, match="holds no t-rex-64"):
        trex_server.resolve(tmp_path, tmp_path)
    bad = tmp_path / "bad.tgz"
    with tarfile.open(bad, "w:gz") as t:
        info = tarfile.TarInfo("README")
        t.addfile(info, io.BytesIO(b""))
    cache = tmp_path / "c"
    with pytest.raises(trex_server.TrexUnavailable, match="holds no t-rex-64"):
        trex_server.resolve(bad, cache)
    assert list(cache.iterdir()) == []                       # nothing half-done left in the cache
    (tmp_path / "torn.tgz").write_bytes(b"not a tarball")
    with pytest.raises(trex_server.TrexUnavailable, match="Couldn't unpack"):
        trex_server.resolve(tmp_path / "torn.tgz", cache)
    assert list(cache.iterdir()) == []
    (tmp_path / "dir" / "scripts").mkdir(parents=True)
    (tmp_path / "dir" / "scripts" / "t-rex-64").write_text("")
    assert trex_server.resolve(tmp_path / "dir") == tmp_path / "dir" / "scripts"


def test_config_yaml_af_packet_low_end():
    y = trex_server.config_yaml(["ga", "gb"], 3, "pfx", [{"src_mac": "02:00:00:00:00:01",
                                                          "dest_mac": "02:00:00:00:00:02"}] * 2)
    assert '"--vdev=net_af_packet0,iface=ga,' in y and '"--vdev=net_af_packet1,iface=gb,' in y
    assert "low_end: true" in y and "low_end_core: 3" in y and "prefix: pfx" in y
    assert "dest_mac: 02:00:00:00:00:02" in y


def test_lab_config_names_the_trex_runtime(tmp_path):
    c = labconfig.load("embedded-trex")
    assert c.backend == "trex" and c.generator == "trex" and c.trex_server is None
    assert c.trex_runtime() == str((Path(c.path).parent / "../../../../shared/trex/trex-v3.08-runtime.tgz").resolve())
    from gtplab.lab.trex_server import DEFAULT_TARBALL
    assert c.trex_runtime() == str(DEFAULT_TARBALL.resolve())
    assert labconfig.load("embedded").generator == "engine" and labconfig.load("embedded").trex_runtime() is None
    f = tmp_path / "lab.yaml"
    for text, msg in (("lab: {generator: ixia}\n", "lab.generator"), ("trex: {runtime: 5}\n", "trex.runtime"),
                      ("trex: {path: x}\n", "unknown key")):
        f.write_text(text)
        with pytest.raises(UserError, match=msg):
            labconfig.load(str(f))
    f.write_text("lab: {generator: trex}\ntrex: {runtime: /abs/t.tgz}\n")
    assert labconfig.load(str(f)).trex_runtime() == "/abs/t.tgz"


def test_lab_up_without_runtime_builds_nothing(tmp_path):
    from gtplab.lab.topology import STATE_DIR, Lab, LabError
    before = set(STATE_DIR.glob("*")) if STATE_DIR.is_dir() else set()
    with pytest.raises(trex_server.TrexUnavailable, match="does not exist"):
        Lab.up("tnoruntime", generator="trex", trex_runtime=str(tmp_path / "none.tgz"))
    with pytest.raises(LabError, match="unknown generator"):
        Lab.up("tnoruntime", generator="ixia")
    assert (set(STATE_DIR.glob("*")) if STATE_DIR.is_dir() else set()) == before
    assert not Path("/run/netns/gtplab-tnoruntime-gen").exists()
