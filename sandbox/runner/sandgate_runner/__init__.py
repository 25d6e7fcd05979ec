"""sandgate's runner: the Python inside every sandbox container (see ../PROTOCOL.md).

Every module says by its place which process it runs in:
  parent/   the runner process itself (the container's init, root): talks to the
            gateway over stdio, runs executions one at a time, serves the bridge
  kernel/   the Python kernel, a child of the runner that runs user code as the sandbox user
  helper/   the lockdown helper, which narrows an execution's view of the file
            system and then becomes its process
  user/     modules for code in the sandbox to import (a client of the bridge)
  boot.py, wire.py   shared by the parent and the kernel: the bytecode cache both load
            from, and their JSON

Start it as the image does: python3 -I -S <this folder> --in-sandbox (see __main__.py).
"""
