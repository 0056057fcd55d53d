"""What a test skipped for lack of a CPU instruction says, so that the run's summary can count them."""

#: the start of the skip reason of a test whose instructions this CPU lacks (tests/conftest.py counts them)
MISSING_CPU_FEATURE = "missing CPU feature"
