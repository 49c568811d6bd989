"""The test suite, a package: the name ``tests`` resolves here, not to a ``tests`` package another install ships
into site-packages (the verl wheel does)."""
