"""The upftest report's plots (gtplab/upftests/plots.py) and its summary in words, from synthetic case
records written as the kinds write them: the SVG's content is checked, not only that a file exists.

Positions are read from the SVG itself: a series' vertices (known values) calibrate the y axis of its
panel, and the MBR line and its +-1 % band must sit where their values map to.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from gtplab.upftests import criteria as C
from gtplab.upftests import plots, record

SVG = "{http://www.w3.org/2000/svg}"
MBRS = {0: 2e6, 1: 5e6}
FACTORS = (0.5, 0.99, 1.5, 2.0)
BURSTS = (1, 8)


def policing_cases() -> list[dict]:
    out = []
    for sess, mbr in MBRS.items():
        for d in ("uplink", "downlink"):
            for b in BURSTS:
                for f in FACTORS:
                    offered = f * mbr
                    out.append({"case_id": f"policing-s{sess}-{d}-512-x{f:g}-b{b}", "kind": "policing",
                                "verdict": "pass", "session": sess, "direction": d, "frame_size": 512,
                                "factor": f, "mbr_bps": mbr, "offered_bps": offered,
                                # burst 8 delivers 0.3 % less above the MBR (inside the band)
                                "delivered_bps": min(offered, mbr) * (0.997 if b > 1 and f > 1 else 1),
                                "burst": b, "burst_role": "swept"})
    out.append({"case_id": "policing-gate", "kind": "policing", "verdict": "pass", "direction": "both"})
    return out


def handover_cases(n: int = 20_000) -> list[dict]:
    """Two sessions of n packets each, 5000/s, switched at 1.5 s after the start (t = 0: the Update's
    send, ns on the capture clock from 10 s), End Marker 1 ms after the last old packet."""
    out = []
    t_req = 10 * 10**9
    for sess in (0, 1):
        t = [t_req - 1_500_000_000 + i * 200_000 for i in range(n)]
        cut = 7_510 if n > 7_510 else n // 2
        on = {"old": [(t[i], i) for i in range(cut)], "new": [(t[i], i) for i in range(cut, n)]}
        em = t[cut - 1] + 1_000_000
        ser = C.seq_series(on, [em], [], t_req)
        prem = [C.premise("switch while the traffic ran", True, update_answered_at=0.004)]
        out.append({"case_id": f"handover-s{sess}", "kind": "handover", "verdict": "pass", "session": sess,
                    "qfi": 9 if sess else None, "missing": 0, "duplicates": 0, "switch_ms": 2.0,
                    "seq_series": ser, "premises": prem, "direction": "downlink"})
    return out


def usage_cases() -> list[dict]:
    rep = [{"urr": 1, "triggers": ["PERIO"], "volume": [300, 100, 200], "at": 1.0},
           {"urr": 1, "triggers": ["PERIO"], "volume": [300, 100, 200], "at": 2.0},
           {"urr": 1, "triggers": [], "volume": [30, 10, 20], "at": 3.0, "where": "deletion"}]
    return [{"case_id": "usage-periodic", "kind": "usage", "verdict": "pass", "session": 2, "reports": rep,
             "generator": {"ul_bytes": 210, "dl_bytes": 420, "ul_packets": 3, "dl_packets": 6}},
            {"case_id": "usage-quota", "kind": "usage", "verdict": "pass", "session": 4, "limit": 330_000,
             "reports": [{"urr": 1, "triggers": ["VOLQU"], "volume": [329_900, 164_950, 164_950], "at": 1.5}]}]


def n4_cases() -> list[dict]:
    out = []
    for ph in ("establishment", "modification", "deletion"):
        for cond, k in (("idle", 1.0), ("loaded", 2.5)):
            out.append({"case_id": f"n4-{ph}-{cond}", "kind": "n4", "verdict": "pass", "phase": ph,
                        "condition": cond, "p50_ms": 1 * k, "p90_ms": 2 * k, "p99_ms": 3 * k, "max_ms": 4 * k,
                        **({"load_pps": 1_260_000} if cond == "loaded" else {})})
    return out


def _groups(svg) -> dict[str, ET.Element]:
    return {g.get("id"): g for g in ET.parse(svg).getroot().iter(f"{SVG}g") if g.get("id")}


def _ys(g: ET.Element) -> list[float]:
    """The y of each vertex of the group's first path (M x y L x y ... [z])."""
    d = next(g.iter(f"{SVG}path")).get("d")
    nums = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", d)]
    return nums[1::2]


def test_policing_plot_has_the_mbr_and_its_band_where_the_values_are_and_a_series_per_burst(tmp_path):
    svg = tmp_path / "policing.svg"
    assert plots.policing_plot(svg, policing_cases())
    g = _groups(svg)
    for sess, mbr in MBRS.items():
        for d in ("uplink", "downlink"):
            series = sorted(k for k in g if k.startswith(f"series-{d}-s{sess}-"))
            assert series == [f"series-{d}-s{sess}-burst-{b}" for b in sorted(BURSTS)], series
            ys = _ys(g[series[0]])                   # delivered 0.5, 0.99, 1, 1 x MBR (sorted by offered)
            assert len(ys) == len(FACTORS)
            scale = (ys[1] - ys[0]) / ((0.99 - 0.5) * mbr / 1e6)      # px per Mb/s (negative: y down)

            def at(v):
                return ys[0] + (v - 0.5 * mbr / 1e6) * scale
            line = _ys(g[f"mbr-{d}-s{sess}"])
            assert line[0] == pytest.approx(at(mbr / 1e6), abs=0.2) == pytest.approx(ys[2], abs=0.2)
            band = _ys(g[f"mbr-band-{d}-s{sess}"])
            assert min(band) == pytest.approx(at(1.01 * mbr / 1e6), abs=0.2)
            assert max(band) == pytest.approx(at(0.99 * mbr / 1e6), abs=0.2)
            # the error panel: above the MBR only (1.5 and 2 x), at 0 % here
            assert len(_ys(g[f"error-{d}-s{sess}-burst-1"])) == 2
    text = svg.read_text()
    assert "MBR 2 Mb/s ± 1 %" in text and "MBR 5 Mb/s ± 1 %" in text


def test_handover_plot_has_one_series_per_path_and_the_end_marker_and_the_record_is_bounded(tmp_path):
    cases = handover_cases()
    ser = cases[0]["seq_series"]
    assert ser["packets"] == {"old": 7_510, "new": 12_490}
    for p in ("old", "new"):
        assert len(ser[p]) <= C.SERIES_POINTS + C.SERIES_SWITCH_POINTS
    # next to the switch every packet is kept: the last old and the first new
    assert ser["old"][-1][1] == 7_509 and ser["new"][0][1] == 7_510
    assert ser["end_markers_old_at"] == [pytest.approx((7_509 * 200_000 + 1_000_000 - 1_500_000_000) / 1e9)]
    svg = tmp_path / "handover.svg"
    assert plots.handover_plot(svg, cases)
    g = _groups(svg)
    for sess in (0, 1):
        assert {f"path-old-s{sess}", f"path-new-s{sess}", f"end-marker-s{sess}-0", f"update-sent-s{sess}",
                f"update-answered-s{sess}"} <= set(g)
        assert not any(k.startswith(f"path-") and k.endswith(f"-s{sess}") and k.split("-")[1] not in ("old", "new")
                       for k in g)
        # one marker per recorded point; the zoom shows the packets next to the switch, the End Marker
        assert len(list(g[f"path-old-s{sess}"].iter(f"{SVG}use"))) == len(cases[sess]["seq_series"]["old"])
        assert {f"zoom-path-old-s{sess}", f"zoom-path-new-s{sess}", f"zoom-end-marker-s{sess}-0"} <= set(g)
        assert len(list(g[f"zoom-path-old-s{sess}"].iter(f"{SVG}use"))) >= 20


def test_usage_plot_adds_up_the_reports_against_the_generators_count(tmp_path):
    svg = tmp_path / "usage.svg"
    assert plots.usage_plot(svg, usage_cases())
    g = _groups(svg)
    assert {"reported-uplink-s2", "reported-downlink-s2", "generator-uplink-s2", "generator-downlink-s2",
            "limit-s4"} <= set(g)
    ys = _ys(g["reported-uplink-s2"])            # steps: 100, 200, 210 octets (steps-post: each twice)
    gen = _ys(g["generator-uplink-s2"])[0]
    assert ys[-1] == pytest.approx(gen, abs=0.2)          # all reports added up = the generator's count


def test_n4_plot_has_idle_and_loaded_per_procedure(tmp_path):
    svg = tmp_path / "n4.svg"
    assert plots.n4_plot(svg, n4_cases())
    g = _groups(svg)
    def height(gid):
        ys = _ys(g[gid])
        return max(ys) - min(ys)
    for ph in ("establishment", "modification", "deletion"):
        unit = height(f"latency-{ph}-idle-p50")             # 1 ms
        for cond, k in (("idle", 1.0), ("loaded", 2.5)):
            for i, p in enumerate(("p50", "p90", "p99", "max"), 1):
                assert height(f"latency-{ph}-{cond}-{p}") == pytest.approx(i * k * unit, rel=0.01), (ph, cond, p)


def test_n4_plot_marks_a_case_whose_premise_did_not_hold(tmp_path):
    """A loaded case "not decided" (the generator did not offer the load asked) is drawn apart: its bars
    hatched, its panel's title saying so; the decided ones are not."""
    cases = n4_cases()
    for c in cases:
        if c["case_id"] == "n4-deletion-loaded":
            c["verdict"] = "not decided"
    svg = tmp_path / "n4.svg"
    assert plots.n4_plot(svg, cases)
    g = _groups(svg)
    assert {k for k in g if k.endswith("-not-decided")} == {f"latency-deletion-loaded-{p}-not-decided"
                                                            for p in ("p50", "p90", "p99", "max")}
    text = svg.read_text()
    assert "deletion (loaded: 1.26 Mpps asked; not decided: hatched)" in text
    assert "establishment (loaded: 1.26 Mpps asked)" in text
    assert 'id="hatch' in text or "<pattern" in text         # matplotlib's hatch is an SVG pattern


def test_nothing_to_draw_writes_nothing(tmp_path):
    for kind, f in plots.PLOTS.items():
        assert not f(tmp_path / f"{kind}.svg", [{"case_id": "x", "kind": kind, "verdict": "not supported"}])
        assert not (tmp_path / f"{kind}.svg").exists()


@pytest.mark.parametrize("kind,cases", [("policing", policing_cases()), ("handover", handover_cases(2000)),
                                        ("usage", usage_cases()), ("n4", n4_cases())])
def test_report_page_shows_the_plot_and_the_summary_in_words(tmp_path, kind, cases):
    run = {"uuid": "u1", "started": "2026-11-28T22:00:00+00:00", "backend": "local", "lab": "x", "host": "h",
           "kind": "upftest", "test": kind, "upf": "PGW-U", "lab_config": "embedded-pfcp", "command": "gtplab upftest"}
    record.write(tmp_path, run, [dict(c) for c in cases])
    page = (tmp_path / "report" / "index.html").read_text()
    assert f"<img src='{kind}.svg'" in page and (tmp_path / "report" / f"{kind}.svg").stat().st_size > 1000
    n = sum(c["verdict"] == "pass" for c in cases)
    assert f"<b>Pass</b>: all {n} decided cases passed." in page
    assert "{'pass'" not in page and '"counts"' not in page and "<pre>" not in page


def test_summary_in_words():
    cs = [{"verdict": v} for v in ["pass"] * 28 + ["fail"] * 80 + ["measured"] * 24 + ["not decided"] * 2]
    assert record.summary_words({}, cs) == ("Fail: 80 of 108 decided cases failed, 28 passed; 2 not decided "
                                            "(a premise did not hold, which says nothing against the UPF: run "
                                            "again on a quieter host); 24 more measured (figures, no criterion).")
