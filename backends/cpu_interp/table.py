"""The cpu_interp lowering table. Every ops module registers its rules into `TABLE`.

Value convention (all rules rely on it): programs of a launch run batched, so every runtime value
carries a leading program axis P. A TTIR scalar is a numpy array of shape (P,); a tensor<AxB> is
(P, A, B); pointers are int64 addresses of the same shapes. bf16 and fp8 compute values are float32
arrays already rounded to the type, f16 is float16, i1 is bool. A rule is
`rule(ctx, op, *operand_values)` and returns the result value (a tuple/list for several results).
"""
from sdk.backend import LoweringTable

TABLE = LoweringTable()
rule = TABLE.rule
