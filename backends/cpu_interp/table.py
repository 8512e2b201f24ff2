"""The batched interpreter's lowering table (assembled in ops.py), and how tables are merged.

Value convention of the rules registered here: programs of a launch run batched, so every runtime
value carries a leading program axis P. A TTIR scalar is a numpy array of shape (P,); a
tensor<AxB> is (P, A, B); pointers are int64 addresses of the same shapes (or lazy `Ptrs`). P may
be 1 for a value every program shares. Element types are held as values.py says. A rule is
`rule(ctx, op, *operand_values)` and returns the result value (a tuple/list for several results).
"""
from sdk.backend import LoweringTable

TABLE = LoweringTable()
rule = TABLE.rule


def merge(table: LoweringTable, *families: LoweringTable) -> None:
    """Copy each family's rules into `table`; an op that two of them define is a mistake."""
    for family in families:
        twice = sorted(set(family.names()) & set(table.names()))
        if twice:
            raise RuntimeError(f"cpu_interp: ops with two rules: {', '.join(twice)}")
        table.update(family)
