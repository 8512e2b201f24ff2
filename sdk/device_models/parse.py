"""Raw YAML data -> `DeviceModel`, checking every field (see `validate.Checker`)."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any

from .dtypes import ATOMIC_OPS, FP8_DTYPES
from .records import (HOST_COSTS, Alignment, Atomics, Compute, DeviceModel, Dram, Features, Launch, MatrixUnit,
                      Memory, SharedMemory, SpecialFunction, TritonTarget, UnitMemory, VectorUnit,
                      Grid)
from .validate import NAME_RE, Checker

SCHEMA_VERSION = 1
KINDS = ("gpu", "npu", "tpu", "cpu")
TOP_REQUIRED = ("schema", "name", "display_name", "vendor", "kind", "fictional", "summary",
                "compute", "memory", "vector", "special_function", "grid", "atomics", "features",
                "alignment", "launch")
TOP_OPTIONAL = ("matrix", "triton")


def parse_model(data: Any, file: str, path: str = "") -> DeviceModel:
    """Check raw data (as `yaml.safe_load` returns it) and build the model. `file` names the file in
    error messages."""
    c = Checker(file)
    if data is None:
        raise c.fail("", "empty file; expected a device model mapping (see docs/devices.md)")
    top = c.mapping(data, "", TOP_REQUIRED, TOP_OPTIONAL)
    if top["schema"] != SCHEMA_VERSION or isinstance(top["schema"], bool):
        raise c.fail("schema", f"must be {SCHEMA_VERSION}, got {top['schema']!r}")
    name = c.text(top["name"], "name", NAME_RE, "lowercase letters, digits and underscores")
    kind = c.text(top["kind"], "kind")
    if kind not in KINDS:
        raise c.fail("kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    model = DeviceModel(
        name=name,
        display_name=c.text(top["display_name"], "display_name"),
        vendor=c.text(top["vendor"], "vendor"),
        kind=kind,
        fictional=c.flag(top["fictional"], "fictional"),
        summary=c.text(top["summary"], "summary").strip(),
        compute=_compute(c, top["compute"]),
        memory=_memory(c, top["memory"]),
        vector=_vector(c, top["vector"]),
        matrix=_matrix(c, top["matrix"]) if "matrix" in top else None,
        special_function=SpecialFunction(c.figure(
            c.mapping(top["special_function"], "special_function", ("gop_per_s",))["gop_per_s"],
            "special_function.gop_per_s", c.positive_number)),
        grid=_grid(c, top["grid"]),
        atomics=_atomics(c, top["atomics"]),
        features=_features(c, top["features"]),
        alignment=_alignment(c, top["alignment"]),
        launch=_launch(c, top["launch"]),
        triton=_triton(c, top["triton"]) if "triton" in top else None,
        path=path,
    )
    _check_consistency(c, model)
    return model


def _compute(c: Checker, node: Any) -> Compute:
    m = c.mapping(node, "compute", ("unit_name", "units", "clock_mhz"))
    return Compute(unit_name=c.text(m["unit_name"], "compute.unit_name"),
                   units=c.figure(m["units"], "compute.units", c.positive_int),
                   clock_mhz=c.figure(m["clock_mhz"], "compute.clock_mhz", c.positive_number))


def _memory(c: Checker, node: Any) -> Memory:
    m = c.mapping(node, "memory", ("per_unit", "dram"), ("shared",))
    u = c.mapping(m["per_unit"], "memory.per_unit", ("kind", "sram_kib"), ("max_per_program_kib", "registers_kib"))
    per_unit = UnitMemory(
        kind=c.text(u["kind"], "memory.per_unit.kind"),
        sram_kib=c.figure(u["sram_kib"], "memory.per_unit.sram_kib", c.positive_number),
        max_per_program_kib=(c.figure(u["max_per_program_kib"], "memory.per_unit.max_per_program_kib",
                                      c.positive_number) if "max_per_program_kib" in u else None),
        registers_kib=(c.figure(u["registers_kib"], "memory.per_unit.registers_kib", c.positive_number)
                       if "registers_kib" in u else None))
    d = c.mapping(m["dram"], "memory.dram", ("kind", "bandwidth_gb_per_s", "size_gb"))
    dram = Dram(kind=c.text(d["kind"], "memory.dram.kind"),
                bandwidth_gb_per_s=c.figure(d["bandwidth_gb_per_s"], "memory.dram.bandwidth_gb_per_s",
                                            c.positive_number),
                size_gb=c.figure(d["size_gb"], "memory.dram.size_gb", c.positive_number))
    shared = None
    if "shared" in m:
        s = c.mapping(m["shared"], "memory.shared", ("kind", "sram_mib"))
        shared = SharedMemory(kind=c.text(s["kind"], "memory.shared.kind"),
                              sram_mib=c.figure(s["sram_mib"], "memory.shared.sram_mib",
                                                c.positive_number))
    return Memory(per_unit=per_unit, dram=dram, shared=shared)


def _vector(c: Checker, node: Any) -> VectorUnit:
    m = c.mapping(node, "vector", ("lanes_per_unit", "tflop_per_s"))
    rates = c.mapping(m["tflop_per_s"], "vector.tflop_per_s")
    if not rates:
        raise c.fail("vector.tflop_per_s", "must give the rate of at least one dtype")
    table = {c.dtype_key(k, "vector.tflop_per_s"): c.figure(v, f"vector.tflop_per_s.{k}",
                                                            c.positive_number)
             for k, v in rates.items()}
    return VectorUnit(lanes_per_unit=c.figure(m["lanes_per_unit"], "vector.lanes_per_unit",
                                              c.positive_int),
                      tflop_per_s=MappingProxyType(table))


def _matrix(c: Checker, node: Any) -> MatrixUnit:
    m = c.mapping(node, "matrix", ("tile_mnk", "tflop_per_s"))
    rates = c.mapping(m["tflop_per_s"], "matrix.tflop_per_s")
    if not rates:
        raise c.fail("matrix.tflop_per_s", "must give at least one operand dtype (or drop `matrix`)")
    table = {}
    for op, accs in rates.items():
        path = f"matrix.tflop_per_s.{c.dtype_key(op, 'matrix.tflop_per_s')}"
        accs = c.mapping(accs, path)
        if not accs:
            raise c.fail(path, "must map at least one accumulator dtype to a rate")
        for acc, fig in accs.items():
            table[(op, c.dtype_key(acc, path))] = c.figure(fig, f"{path}.{acc}", c.positive_number)
    return MatrixUnit(tile_mnk=c.figure(m["tile_mnk"], "matrix.tile_mnk", c.triple),
                      tflop_per_s=MappingProxyType(table))


def _grid(c: Checker, node: Any) -> Grid:
    m = c.mapping(node, "grid", ("max_programs", "bound_to_cores"))
    return Grid(max_programs=c.figure(m["max_programs"], "grid.max_programs", c.triple),
                bound_to_cores=c.figure(m["bound_to_cores"], "grid.bound_to_cores", c.bool_value))


def _atomics(c: Checker, node: Any) -> Atomics:
    m = c.mapping(node, "atomics", ("add",), ATOMIC_OPS[1:])
    return Atomics(MappingProxyType({op: c.figure(m[op], f"atomics.{op}", c.dtype_list)
                                     for op in ATOMIC_OPS if op in m}))


def _features(c: Checker, node: Any) -> Features:
    m = c.mapping(node, "features", ("fp64", "fp8", "bf16"))
    return Features(**{k: c.figure(m[k], f"features.{k}", c.bool_value) for k in ("fp64", "fp8", "bf16")})


def _alignment(c: Checker, node: Any) -> Alignment:
    keys = ("vector_bytes", "matrix_bytes", "allocation_bytes")
    m = c.mapping(node, "alignment", keys)
    return Alignment(**{k: c.figure(m[k], f"alignment.{k}", c.positive_int) for k in keys})


def _launch(c: Checker, node: Any) -> Launch:
    m = c.mapping(node, "launch", ("overhead_us",), ("host_us",))
    overhead = c.figure(m["overhead_us"], "launch.overhead_us", c.positive_number)
    if "host_us" not in m:
        return Launch(overhead)
    host = c.mapping(m["host_us"], "launch.host_us", (), HOST_COSTS)
    if not host:
        raise c.fail("launch.host_us", f"must give at least one of {', '.join(HOST_COSTS)} (or drop it)")
    figures = {}
    for key in HOST_COSTS:
        if key in host:
            fig = c.figure(host[key], f"launch.host_us.{key}", c.positive_number)
            if fig.source_kind != "measured":
                raise c.fail(f"launch.host_us.{key}.source", "must say how it was measured ('measured: ...'): "
                             f"host figures are measured on the host that drives the device, got {fig.source!r}")
            figures[key] = fig
    return Launch(overhead, MappingProxyType(figures))


def _triton(c: Checker, node: Any) -> TritonTarget:
    m = c.mapping(node, "triton", (), ("backend", "arch", "warp_size"))
    if not m:
        raise c.fail("triton", "must give at least one of backend, arch, warp_size (or drop `triton`)")
    return TritonTarget(
        backend=c.figure(m["backend"], "triton.backend", c.str_value) if "backend" in m else None,
        arch=c.figure(m["arch"], "triton.arch", c.str_value) if "arch" in m else None,
        warp_size=(c.figure(m["warp_size"], "triton.warp_size", c.positive_int)
                   if "warp_size" in m else None))


def _check_consistency(c: Checker, model: DeviceModel) -> None:
    """Figures that contradict each other (a rate for a dtype the features rule out ...)."""
    flags = {"fp64": model.features.fp64.value, "bf16": model.features.bf16.value,
             **{d: model.features.fp8.value for d in FP8_DTYPES}}
    uses = [(f"vector.tflop_per_s.{d}", d) for d in model.vector.tflop_per_s]
    if model.matrix is not None:
        uses += [(f"matrix.tflop_per_s.{o}.{a}", d)
                 for (o, a) in model.matrix.tflop_per_s for d in (o, a)]
    uses += [(f"atomics.{op}", d) for op, fig in model.atomics.ops.items() for d in fig.value]
    for path, dtype in uses:
        if flags.get(dtype) is False:
            family = "fp8" if dtype in FP8_DTYPES else dtype
            raise c.fail(path, f"uses {dtype} but features.{family} is false")
    from .arithmetic import check_derived
    for finding in check_derived(model):
        if finding.status == "mismatch":
            raise c.fail(finding.path + ".source", str(finding).split(": ", 1)[1])
    per_unit = model.memory.per_unit
    if per_unit.max_per_program_kib and per_unit.max_per_program_kib.value > per_unit.sram_kib.value:
        raise c.fail("memory.per_unit.max_per_program_kib",
                     f"must not exceed memory.per_unit.sram_kib ({per_unit.sram_kib.value})")
