"""Triton's `triton.backends` entry point for nvidia_ref: Triton imports `.compiler` and `.driver`."""
