"""The Python kernel: a child of the runner, as the sandbox user, in which user code
runs (main.py; the runner's handle on it is parent/kernel_handle.py)."""
