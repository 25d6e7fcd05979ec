"""The runner process: the container's init (pid 1, root with SETUID, SETGID and KILL),
the gateway's peer over stdio and the parent of every process that runs user code. Its
modules never run in those processes. main.py says what each part does."""
