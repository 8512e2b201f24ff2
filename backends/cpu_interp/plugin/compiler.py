from sdk.triton_bridge import compiler_class

CpuInterpCompiler = compiler_class("cpu_interp")
