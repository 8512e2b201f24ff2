"""The batched interpreter's lowering table, assembled in one place.

Structural rules (control flow, memory, shapes, reductions) hold values with a leading program
axis and register into `TABLE` from control.py, ops_memory.py and ops_tensor.py. Element-wise and
dot rules are shape-agnostic and shared with the reference interpreter (reference.py): their
families' tables (ops_arith.ARITH, ops_math.MATH, ops_dot.DOT) are copied in. Each op has exactly
one rule: a name registered twice is an error here, not a silent override.
"""
from __future__ import annotations

import numpy as np

from . import control, ops_memory, ops_tensor  # noqa: F401  (importing them registers their rules)
from .ops_arith import ARITH
from .ops_dot import DOT
from .ops_math import MATH
from .table import TABLE, merge, rule
from .values import value_dtype

__all__ = ["TABLE"]


@rule("ub.poison")
def _poison(ctx, op):
    """An undefined value (e.g. a loop-carried variable first assigned inside the loop): any value
    is allowed, so a fixed zero (one for every program) keeps runs reproducible."""
    t = op.result.type
    return np.zeros((1,) + tuple(t.shape), dtype=value_dtype(t))


merge(TABLE, ARITH, MATH, DOT)
