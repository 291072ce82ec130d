"""The ``mqstore`` command line."""
