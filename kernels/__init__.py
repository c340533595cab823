"""Triton kernels, one sub-package per op, each with its pure-torch reference."""
