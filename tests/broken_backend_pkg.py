"""A backend package whose import fails, as a half-installed vendor package would."""
import this_module_does_not_exist  # noqa: F401
