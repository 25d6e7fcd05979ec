"""The gateway's end inside a pod: `exec`'d by the gateway (as root, the container's
user), it joins its stdin and stdout to the runner's socket (SocketChannel in
sandgate_runner/parent/gateway_channel.py) until either side ends. Output through exec
is not kept by the kubelet, where the container's own stdout would be written to the
node's logs.

    python3 -I -S /opt/sandgate/runner/relay.py /run/sandgate/runner.sock [seconds to wait for it]
"""
import os
import socket
import sys
import threading


def connect(path, seconds):
    """The runner's socket, waited for while a pod that just started binds it."""
    import time
    end = time.monotonic() + seconds
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return s
        except OSError:
            s.close()
            if time.monotonic() > end:
                raise
            time.sleep(0.02)


def main():
    s = connect(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 30)

    def up():
        try:
            while True:
                data = os.read(0, 65536)
                if not data:
                    break
                s.sendall(data)
        except OSError:
            pass
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    threading.Thread(target=up, daemon=True).start()
    while True:
        data = s.recv(65536)
        if not data:
            break
        view = memoryview(data)
        while view:
            view = view[os.write(1, view):]


if __name__ == '__main__':
    main()
