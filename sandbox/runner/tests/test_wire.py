"""The JSON the runner and the kernel speak (wire.py): json's, but for NaN and Infinity."""
import json
import unittest

from sandgate_runner import wire as sandgate_wire


class WireTest(unittest.TestCase):
    def test_wire_is_json(self):
        values = [0, -1, 2 ** 70, 1.5, 1e300, -0.0, None, True, 'x', 'ünï "\\ \n\x00\u2028', '\ud800',
                  [], {}, {'a': [1, {'b': None}], 'é': 'ü'}]
        for value in values:
            for ascii_only in (False, True):
                self.assertEqual(sandgate_wire.dumps(value, ascii_only),
                                 json.dumps(value, ensure_ascii=ascii_only, separators=(',', ':')))
            text = json.dumps(value)
            if value == value:  # not NaN
                self.assertEqual(sandgate_wire.loads(text), json.loads(text))
                self.assertEqual(sandgate_wire.loads(text.encode()), json.loads(text))
        for bad in ('', '{', 'nope', '[1] x', '{"a" 1}', 'NaN', '[Infinity]', '{"a": -Infinity}'):
            with self.assertRaises(ValueError):
                sandgate_wire.loads(bad)
        # Not JSON either way: the gateway would take the line for a broken one.
        for value in (float('nan'), [float('inf')], {'a': float('-inf')}):
            with self.assertRaises(ValueError):
                sandgate_wire.dumps(value)


if __name__ == '__main__':
    unittest.main()
