"""cpu_interp: Triton kernels' TTIR executed on the CPU with numpy (the reference backend)."""
from .backend import CpuInterpBackend

__all__ = ["CpuInterpBackend"]
