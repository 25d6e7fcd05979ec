/**
 * The Python that runs the gateway's small host-side helpers (host/workspace_helper.py,
 * host/upstream_launcher.py). They drop to unprivileged users as they start, so the
 * interpreter and its standard library must be readable by anyone: Debian's
 * /usr/bin/python3 (the set-up installs it), not one under a user's home such as pyenv's.
 */
import fs from 'node:fs';

export const HOST_PYTHON = fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
