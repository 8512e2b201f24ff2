"""What compiled code and its launcher (launch.py) agree on besides the functions' signatures
(core.py): the kind of fault a program reports in fault[0]; the launcher turns each into the
interpreter's message."""

FAULT_OOB, FAULT_ASSERT, FAULT_STEP, FAULT_RAW = 1, 2, 3, 4

__all__ = ["FAULT_ASSERT", "FAULT_OOB", "FAULT_RAW", "FAULT_STEP"]
