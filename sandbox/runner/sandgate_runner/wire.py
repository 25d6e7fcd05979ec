"""JSON for the runner and the kernel (both load this module), straight from json's C
accelerator (_json).

`import json` also loads re, enum and functools: about 1.2 MB that every idle sandbox
would keep twice (runner and kernel). This module drives the same C scanner and
encoder that json.loads / json.dumps use, so the results are identical, but for one
thing: NaN and Infinity, which are not JSON, are refused both ways (the gateway would
take a line holding them for a broken one). When _json is missing or its signature
differs (another Python version), it falls back to json.
"""


def _no_constant(name):
    raise ValueError('%s is not JSON' % name)


try:
    import _json

    class _Context:
        """What _json.make_scanner reads from a json.JSONDecoder."""
        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = staticmethod(_no_constant)
        memo = {}

    def _default(obj):
        raise TypeError('Object of type %s is not JSON serializable' % type(obj).__name__)

    _scan = _json.make_scanner(_Context())
    # As json.dumps(..., separators=(',', ':')) with ensure_ascii False / True.
    _encode_utf8 = _json.make_encoder({}, _default, _json.encode_basestring, None, ':', ',', False, False, False)
    _encode_ascii = _json.make_encoder({}, _default, _json.encode_basestring_ascii, None, ':', ',', False, False,
                                       False)
    _WHITESPACE = ' \t\n\r'

    def loads(data):
        """json.loads for str or UTF-8 bytes; raises ValueError."""
        if isinstance(data, (bytes, bytearray)):
            data = data.decode('utf-8', 'surrogatepass')
        start = len(data) - len(data.lstrip(_WHITESPACE))
        try:
            obj, end = _scan(data, start)
        except StopIteration as err:
            raise ValueError('Expecting value: char %d' % err.value) from None
        if data[end:].strip(_WHITESPACE):
            raise ValueError('Extra data: char %d' % end)
        return obj

    def dumps(obj, ascii=False):
        """json.dumps(obj, ensure_ascii=ascii, separators=(',', ':'))."""
        if ascii:
            return ''.join(_encode_ascii(obj, 0))
        return ''.join(_encode_utf8(obj, 0))

    _encode_ascii({'check': [1, 2.5, None, True, 'x']}, 0)  # the signature is the one expected
except (ImportError, TypeError, AttributeError):
    import json

    def loads(data):
        return json.loads(data, parse_constant=_no_constant)

    def dumps(obj, ascii=False):
        return json.dumps(obj, ensure_ascii=ascii, separators=(',', ':'), allow_nan=False)


def json_line(obj):
    """One protocol line. Lone surrogates (from a client's JSON) fall back to \\u escapes."""
    try:
        return dumps(obj).encode('utf-8') + b'\n'
    except UnicodeEncodeError:
        return dumps(obj, ascii=True).encode('ascii') + b'\n'
