"""A third-party UPF in the tests, as a lab config of gtplab/lab/labs/ runs it (embedded-eupf,
embedded-open5gs): the config with its vars or dut keys changed, and a skip naming the reason when
the UPF's runtime is absent. Used by tests/lib/eupf.py and tests/lab/test_open5gs.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gtplab.lab import config as labconfig
from gtplab.lab import runtime
from tests.lib import REPO

LABS = REPO / "gtplab/lab/labs"


def lab_config(name: str, tmp_path: Path | None = None, dut: dict | None = None, **vars_):
    """gtplab/lab/labs/NAME.yaml as a LabConfig; with vars (dut.external.vars) or dut keys (None
    removes a key), a copy in tmp_path with them (its runtime path made absolute, as the copy lives
    elsewhere). Skipped, with the reason, when the UPF's runtime is absent."""
    path = LABS / f"{name}.yaml"
    if not vars_ and not dut:
        cfg = labconfig.load(str(path))
    else:
        d = yaml.safe_load(path.read_text())
        for k, v in (dut or {}).items():
            if v is None:
                d["dut"].pop(k, None)
            else:
                d["dut"][k] = v
        ext = d["dut"]["external"]
        ext["vars"] = {**ext.get("vars", {}), **vars_}
        ext["runtime"] = str((path.parent / ext["runtime"]).resolve())
        f = tmp_path / f"{name}.yaml"
        f.write_text(yaml.safe_dump(d, sort_keys=False))
        cfg = labconfig.load(str(f))
    require_runtime(cfg)
    return cfg


def require_runtime(cfg) -> None:
    """Skip (the reason shown: where it was looked for) when the UPF's runtime is absent."""
    spec = cfg.external_spec()
    try:
        runtime.resolve(spec.runtime, spec.runtime_env, cfg.dut.get("name") or "the UPF")
    except runtime.RuntimeUnavailable as e:
        pytest.skip(str(e))
