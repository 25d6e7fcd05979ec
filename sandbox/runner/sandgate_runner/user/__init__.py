"""Modules for code that runs in the sandbox to import (bridge_client.py). The Python
library user code gets on its PYTHONPATH is tools/python/sandgate_tools, which speaks
the same bridge wire."""
