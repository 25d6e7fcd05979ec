"""The lockdown helper: a process the runner starts under unshare(1), which narrows the
file system for one execution and then becomes that execution's process (lockdown.py,
run as a script from its read-only source; the runner's side is parent/narrowing.py)."""
