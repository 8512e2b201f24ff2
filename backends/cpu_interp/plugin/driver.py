from sdk.triton_bridge import driver_class

CpuInterpDriver = driver_class("cpu_interp")
