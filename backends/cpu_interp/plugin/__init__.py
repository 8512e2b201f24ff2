"""Triton's `triton.backends` entry point for cpu_interp: Triton imports `.compiler` and `.driver`."""
