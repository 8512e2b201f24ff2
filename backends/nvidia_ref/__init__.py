"""nvidia_ref: Triton's own CUDA pipeline as a day0 backend — compile for any sm_XX without a GPU,
run and time on a real one (the golden device)."""
from .backend import NvidiaRefBackend

__all__ = ["NvidiaRefBackend"]
