"""Starting a deployment: on Ray (`deployment.py`, `serve.py`) or in one process without Ray (`local.py`)."""
