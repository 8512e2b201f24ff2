"""Device models: shipped files validate, published figures load, malformed files fail in one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sdk import device_models as dm
from sdk.cli import main
from sdk.device_models.render import markdown
from sdk.device_models import figures_of
from sdk.errors import ConfigError, UnknownName

ROOT = Path(__file__).resolve().parents[1]
BAD = Path(__file__).resolve().parent / "data" / "bad_device_models"
REQUIRED = {"nvidia_l4", "nvidia_h100", "nvidia_h200", "nvidia_gb10_spark", "amd_mi300x",
            "google_tpu_v5e", "tenstorrent_wormhole_n300", "intel_gaudi3", "generic_npu", "host_cpu"}


def test_every_required_model_is_shipped_and_validates():
    assert REQUIRED <= set(dm.names())
    models = dm.all_models()
    assert [m.name for m in models] == dm.names()
    for m in models:
        assert figures_of(m), m.name
        for path, fig in figures_of(m):
            assert fig.source_kind in ("datasheet", "derived", "measured", "assumed"), (m.name, path)


@pytest.mark.parametrize("name, figure, expected", [
    ("nvidia_h100", lambda m: m.units, 132),
    ("nvidia_h100", lambda m: m.memory.per_unit.sram_kib.value, 228),
    ("nvidia_h100", lambda m: m.memory.dram.bandwidth_gb_per_s.measured.value, 3017),
    ("nvidia_h100", lambda m: m.dram_bytes_per_s, 3.35e12),  # the datasheet is the basis
    ("nvidia_h100", lambda m: m.matrix_flops_per_s("bf16", "fp32"), 989.4e12),
    ("nvidia_h100", lambda m: m.matrix.tflop_per_s[("bf16", "fp32")].measured.value, 791),
    ("nvidia_h200", lambda m: m.memory.dram.size_gb.value, 141),
    ("nvidia_h200", lambda m: m.dram_bytes_per_s, 4.8e12),
    ("nvidia_l4", lambda m: m.memory.dram.bandwidth_gb_per_s.value, 300),
    ("nvidia_l4", lambda m: m.vector_flops_per_s("fp32"), 30.3e12),
    ("nvidia_l4", lambda m: m.triton.arch.value, "sm_89"),
    ("nvidia_gb10_spark", lambda m: m.memory.dram.bandwidth_gb_per_s.value, 273),
    ("amd_mi300x", lambda m: (m.units, m.compute.clock_mhz.value), (304, 2100)),
    ("amd_mi300x", lambda m: m.warp_size, 64),
    ("amd_mi300x", lambda m: m.dram_bytes_per_s, 5.3e12),
    ("google_tpu_v5e", lambda m: m.peak_flops_per_s("bf16"), 197e12),
    ("google_tpu_v5e", lambda m: m.dram_bytes, 16e9),
    ("tenstorrent_wormhole_n300", lambda m: (m.units, m.on_chip_bytes_per_unit), (128, 1536 * 1024)),
    ("tenstorrent_wormhole_n300", lambda m: m.matrix_flops_per_s("fp8e4m3"), 466e12),
    ("intel_gaudi3", lambda m: m.matrix_flops_per_s("bf16", "fp32"), 1835e12),
    ("intel_gaudi3", lambda m: m.shared_on_chip_bytes, 96 * 2**20),
])
def test_published_figures(name, figure, expected):
    assert figure(dm.load(name)) == pytest.approx(expected)


def test_sources_are_attached_and_classified():
    h100 = dm.load("nvidia_h100")
    bw = h100.memory.dram.bandwidth_gb_per_s
    assert bw.source_kind == "datasheet" and bw.measured.source_kind == "measured"
    assert h100.compute.clock_mhz.source_kind == "derived"
    assert h100.compute.units.source.startswith("https://")
    assert dm.load("generic_npu").compute.units.source_kind == "assumed"


def test_generic_npu_is_the_scratchpad_reference():
    npu = dm.load("generic_npu")
    assert npu.fictional and npu.grid_bound_to_cores and npu.warp_size == 1
    assert not npu.supports("fp64") and not npu.supports("float64")
    assert npu.supports_dot("bf16", "fp32") and npu.supports_dot("fp8e4nv", "f32")
    assert not npu.supports_dot("fp16", "fp32") and not npu.supports_dot("bf16", "bf16")
    assert npu.supports_atomic("add", "fp32") and not npu.supports_atomic("add", "int64")
    assert npu.max_program_bytes == 512 * 1024
    assert npu.max_grid == (65535, 65535, 65535)


def test_accessors_in_si_units():
    h100 = dm.load("nvidia_h100")
    assert h100.clock_hz == 1.98e9
    assert h100.max_program_bytes == 227 * 1024 < h100.on_chip_bytes_per_unit
    assert h100.launch_overhead_s == pytest.approx(5e-6)
    assert h100.special_function_ops_per_s == pytest.approx(4182e9)
    assert h100.total_on_chip_bytes == 132 * 228 * 1024 + 50 * 2**20
    # the best accumulator when none is named; None for what the matrix unit does not take
    assert h100.matrix_flops_per_s("fp8e5m2") == pytest.approx(1978.9e12)
    assert h100.matrix_flops_per_s("int4") is None
    assert dm.load("host_cpu").matrix is None
    assert dm.load("host_cpu").matrix_flops_per_s("bf16") is None
    assert dm.load("host_cpu").peak_flops_per_s("bf16") == pytest.approx(0.768e12)


def test_dtype_support_and_spellings():
    mi300 = dm.load("amd_mi300x")
    assert mi300.supports("fp8e4b8") and not mi300.supports("fp8e4nv")  # FNUZ variants only
    tpu = dm.load("google_tpu_v5e")
    assert tpu.supports("bf16") and not tpu.supports("fp8e5m2") and not tpu.supports("f64")
    assert dm.load("nvidia_h100").supports("torch.float8_e4m3fn")
    assert dm.canonical_dtype("f8E4M3FN") == "fp8e4m3" and dm.canonical_dtype("i64") == "int64"
    with pytest.raises(UnknownName):
        dm.canonical_dtype("fp12")


def test_round_trip_through_plain_data(tmp_path):
    for m in dm.all_models():
        path = tmp_path / f"{m.name}.yaml"
        path.write_text(yaml.safe_dump(dm.to_dict(m), sort_keys=False))
        again = dm.load(path)
        assert dm.to_dict(again) == dm.to_dict(m)
        assert figures_of(again) == figures_of(m)


def test_names_are_checked_before_the_file_system(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nvidia_h100").write_text("not a model")  # a bare NAME never reads the cwd
    assert dm.load("nvidia_h100").name == "nvidia_h100"
    for bad in ("Nvidia_H100", "h100!", "..", "", "nvidia h100"):
        with pytest.raises(UnknownName):
            dm.load(bad)
    assert dm.is_path("my_npu.yaml") and dm.is_path("./x") and dm.is_path("a/b.yml")
    assert not dm.is_path("generic_npu")
    with pytest.raises(ConfigError, match="no such device model file"):
        dm.load("missing.yaml")


def test_vendor_model_loads_from_a_path(tmp_path):
    data = dm.to_dict(dm.load("generic_npu"))
    data.update(name="acme_npu", display_name="ACME NPU", fictional=False)
    data["compute"]["units"] = {"value": 8, "source": "https://acme.example/npu-datasheet"}
    path = tmp_path / "acme_npu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    m = dm.load(str(path))
    assert (m.name, m.units, m.compute.units.source_kind) == ("acme_npu", 8, "datasheet")


BAD_FILES = sorted(BAD.glob("*.yaml"))


def test_bad_corpus_is_there():
    assert len(BAD_FILES) >= 10


@pytest.mark.parametrize("path", BAD_FILES, ids=[p.stem for p in BAD_FILES])
def test_bad_model_gives_one_clear_line_and_exit_2(path, capsys):
    expect = path.read_text().splitlines()[0].removeprefix("# expect: ")
    assert main(["devices", "show", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"day0: error: {path.name}: ")
    assert expect in lines[0]
    with pytest.raises(ConfigError):
        dm.load(path)


def test_cli_table_and_show(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    header, rows = out.splitlines()[0], out.splitlines()[2:]
    assert header.split()[:3] == ["name", "kind", "units"]
    assert {r.split()[0] for r in rows} == set(dm.names())
    h100 = next(r for r in rows if r.startswith("nvidia_h100 "))
    assert "132 SM" in h100 and "132 x 228 KiB + 50 MiB" in h100 and "989.4 TFLOP/s" in h100

    assert main(["devices", "show", "nvidia_h200"]) == 0
    out = capsys.readouterr().out
    assert "https://www.nvidia.com/en-us/data-center/h200/" in out
    assert "memory.dram.bandwidth_gb_per_s" in out and "4800; measured 4244" in out

    assert main(["devices", "show", "nvidia_l4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["compute"]["clock_mhz"]["value"] == 2040

    assert main(["devices", "show", "no_such_device"]) == 2
    assert "unknown device model 'no_such_device'" in capsys.readouterr().err


def test_docs_are_generated_and_not_stale(tmp_path, capsys):
    docs = ROOT / "docs" / "devices.md"
    assert docs.read_text(encoding="utf-8") == markdown(dm.all_models()), \
        "docs/devices.md is stale: run `day0 devices docs --out docs/devices.md --force`"
    assert main(["devices", "docs", "--out", str(docs), "--check"]) == 0
    stale = tmp_path / "devices.md"
    stale.write_text("old\n")
    assert main(["devices", "docs", "--out", str(stale), "--check"]) == 1
    assert "stale" in capsys.readouterr().err
    before = stale.read_text()
    assert main(["devices", "docs", "--out", str(stale)]) == 2  # never overwritten without --force
    assert stale.read_text() == before
    assert main(["devices", "docs", "--out", str(stale), "--force"]) == 0
    assert main(["devices", "docs", "--out", str(stale), "--check"]) == 0
    text = stale.read_text()
    for name in dm.names():
        assert f"## {name}" in text
    assert "https://docs.tenstorrent.com/aibs/wormhole/specifications.html" in text
