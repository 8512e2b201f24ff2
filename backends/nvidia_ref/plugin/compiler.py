from sdk.triton_bridge import compiler_class

NvidiaRefCompiler = compiler_class("nvidia_ref")
