"""cpu_interp: Triton kernels' TTIR executed on the CPU with numpy (the reference backend).

Importing this package is cheap and cannot fail: Triton imports `backends.cpu_interp.plugin` while
it starts, so the backend itself loads only when `CpuInterpBackend` is first asked for."""


def __getattr__(name: str):
    if name in ("CpuInterpBackend", "extra_tensors"):
        from . import backend
        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CpuInterpBackend", "extra_tensors"]
