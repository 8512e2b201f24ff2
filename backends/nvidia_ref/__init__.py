"""nvidia_ref: Triton's own CUDA pipeline as a day0 backend — compile for any sm_XX without a GPU,
run and time on a real one (the golden device).

Importing this package is cheap and cannot fail: Triton imports `backends.nvidia_ref.plugin` while it
starts, so the backend itself loads only when `NvidiaRefBackend` is first asked for."""


def __getattr__(name: str):
    if name == "NvidiaRefBackend":
        from .backend import NvidiaRefBackend
        return NvidiaRefBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["NvidiaRefBackend"]
