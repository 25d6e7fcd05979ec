"""What an execution's `done` says: the event itself, the fields taken from a kernel's
(or host's) reply, bounded, and the notices the runner writes when it, not the code,
ended or changed something."""
from .settings import MAX_RESULT_CHARS


def bounded(value, limit, keep_tail=False):
    """value when it is a string of at most `limit` characters, cut to that when longer
    (keeping its end with keep_tail), None when it is not a string."""
    if not isinstance(value, str):
        return None
    if len(value) <= limit:
        return value
    return '...' + value[-limit:] if keep_tail else value[:limit] + '...'


def exec_outcome_of(reply):
    """The outcome fields of a kernel's exec reply, of the types and sizes the protocol
    allows (user code can write a reply of its own)."""
    code = reply.get('exitCode')
    if isinstance(code, bool) or not isinstance(code, int) or not -(1 << 31) <= code < 1 << 31:
        code = 1
    outcome = {'exitCode': code, 'result': bounded(reply.get('result'), MAX_RESULT_CHARS)}
    error = reply.get('error')
    if isinstance(error, dict):
        outcome['error'] = {'name': bounded(error.get('name'), 200) or 'Error',
                            'message': bounded(error.get('message'), 4096) or '',
                            'traceback': bounded(error.get('traceback'), 16384, keep_tail=True) or ''}
    figure_error = bounded(reply.get('figureError'), 500)
    notices = [bounded(reply.get('notice'), 1000)]  # the Deno host's
    if figure_error:
        notices.append('Open matplotlib figures could not be saved (%s).' % figure_error)
    if any(notices):
        outcome['notice'] = ' '.join(n for n in notices if n)
    refused = bounded(reply.get('refused'), 500)
    if refused is not None:
        outcome['refused'] = refused
    return outcome


def with_lost(outcome, lost):
    """The outcome, said to have restarted (and why first in its notice) when `lost`."""
    if lost:
        outcome['restarted'] = True
        outcome['notice'] = ' '.join(n for n in (lost, outcome.get('notice')) if n)
    return outcome


# What each long-lived process loses when it ends.
LOST_STATE = {
    'Python kernel': 'Variables and imports from earlier executions are gone.',
    'Deno host': 'Top-level names and imports of earlier TypeScript and JavaScript executions are gone.',
    'bash shell': 'Shell variables and functions of earlier executions are gone.',
}


def restarted_notice(label):
    """'The Python kernel was restarted: variables and imports ... are gone.'"""
    state = LOST_STATE[label]
    return 'The %s was restarted: %s%s' % (label, state[0].lower(), state[1:])


PYTHON_LOST = restarted_notice('Python kernel')
DENO_LOST = restarted_notice('Deno host')
BASH_LOST = restarted_notice('bash shell')
BASH_BACKGROUND = ('Processes the script left running were ended, and the bash shell with them: shell variables and'
                   ' functions of earlier executions are gone.')
BASH_EXITED = ('The script ended the bash shell (exit, or an error under set -e), so shell variables and functions'
               ' of earlier executions are gone.')
SEPARATE_DENO = ('This execution ran in a separate Deno process because its permissions are narrowed: top-level'
                 ' names and imports of earlier executions are not visible to it, and nothing it defined is kept.')
BEYOND_HOST = ('This execution ran in a separate Deno process because its permissions go beyond what the Deno host'
               ' was started with (%s): top-level names and imports of earlier executions are not visible to it,'
               ' and nothing it defined is kept.')


def hint_for(exc):
    if isinstance(exc, BlockingIOError):  # EAGAIN from fork: the nproc limit
        return (' (the sandbox is at its process limit; processes started from Python keep'
                ' running between executions until they exit or the kernel restarts)')
    return ''


def ms(seconds):
    return round(seconds * 1000, 3)


def stop_notice(reason, timeout_ms):
    if reason == 'timeout':
        return 'Execution timed out after %s s and was killed.' % ('%g' % (timeout_ms / 1000))
    return 'Execution cancelled and killed.'


def done_event(exec_id, exitCode=None, durationMs=0, timedOut=False, killed=False, restarted=False,
               truncated=None, files=None, notice=None, result=None, error=None):
    event = {'type': 'done', 'id': exec_id, 'exitCode': exitCode, 'durationMs': durationMs,
             'timedOut': timedOut, 'killed': killed, 'restarted': restarted,
             'truncated': truncated or {'stdout': 0, 'stderr': 0}, 'files': files or []}
    if result is not None:
        event['result'] = result
    if notice:
        event['notice'] = notice
    if error:
        event['error'] = error
    return event
