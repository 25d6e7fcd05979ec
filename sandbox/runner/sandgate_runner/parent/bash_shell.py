"""The bash shell: one long-lived `bash --noprofile --norc` that runs each bash
execution's script in itself, spoken to like the Python kernel (this is the runner's
handle on it)."""
import os

from .kernel_handle import Kernel
from .script_files import write_in_place
from .settings import BASH


# The shell's own loop. Each request is one line: the execution's id and its script's
# path. The script is written over the previous one in place and the prelude (the
# environment but for the execution's id, the working directory) only when it changes:
# code that fills /tmp must not stop the next bash execution.
# Options are put back after each script; variables and functions stay, as in a
# terminal. `exit` (or an error under `set -e`) ends the shell: the runner starts another.
SHELL_LOOP = r"""__sg_req=$1 __sg_rep=$2 __sg_prelude=$3 __sg_names=$4
__sg_opts=$(builtin set +o)
builtin printf '{"ready":true}\n' >&"$__sg_rep"
while builtin read -r -u "$__sg_req" __sg_id __sg_script; do
  builtin . "$__sg_prelude" </dev/null
  builtin export SANDGATE_EXEC_ID="$__sg_id"
  builtin . "$__sg_script" </dev/null
  __sg_status=$?
  builtin eval "$__sg_opts"
  builtin printf '{"id":"%s","exitCode":%d}\n' "$__sg_id" "$__sg_status" >&"$__sg_rep"
done
"""


def shell_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


class BashShell(Kernel):
    """A long-lived bash that runs each script in itself: bash is spoken to like the
    Python kernel, and no process is started per execution (a fork alone costs tens of
    milliseconds under gVisor)."""

    label = 'bash shell'

    def __init__(self, state_dir):
        super().__init__()
        # The runner's files, made at start (reserve_files): code can read them, not
        # change them, but for the scratch file the shell itself writes.
        self.prelude = os.path.join(state_dir, 'bash-prelude.sh')
        self.script = os.path.join(state_dir, 'exec.sh')
        self.names = os.path.join(state_dir, 'bash-names')
        self.written = None  # the prelude as last written

    def argv(self, req_r, rep_w):
        return [BASH, '--noprofile', '--norc', '-c', SHELL_LOOP, 'bash', str(req_r), str(rep_w), self.prelude,
                self.names]

    def write_script(self, code):
        return write_in_place(self.script, code)

    def send(self, obj):
        """Starts one execution ({id, env, script, cwd}; id and script without blanks)."""
        lines = ['builtin compgen -e > "$__sg_names"; builtin mapfile -t __sg_n < "$__sg_names"',
                 '(( ${#__sg_n[@]} )) && builtin export -n -- "${__sg_n[@]}"; builtin unset __sg_n']
        lines += ['builtin export -- %s=%s' % (name, shell_quote(value))
                  for name, value in obj['env'].items() if name != 'SANDGATE_EXEC_ID']
        lines += ['builtin cd -- %s' % shell_quote(obj['cwd']), '']
        prelude = '\n'.join(lines)
        if prelude != self.written:
            write_in_place(self.prelude, prelude)
            self.written = prelude
        data = ('%s %s\n' % (obj['id'], obj['script'])).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(self.req_w, view):]

    def close(self):
        self.written = None
        super().close()
