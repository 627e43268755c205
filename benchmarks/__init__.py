"""vitlab's benchmarks: scripts that measure speed and accuracy against the references (`python benchmarks/NAME.py`),
and the harness they share (`benchmarks.harness`). A folder of the repository, not part of the installed package."""
