from sdk.triton_bridge import driver_class

NvidiaRefDriver = driver_class("nvidia_ref")
