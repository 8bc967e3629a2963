"""Tests of {{name}}: run with `python3 -m unittest` in this directory."""
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def run(params, attempt="1"):
    """Runs agent.py as the worker would: the envelope on stdin."""
    envelope = {"payload": {"action": "greet", "params": params}}
    env = dict(os.environ, ORCH_ATTEMPT=attempt)
    env.pop("ORCH_PROGRESS_FD", None)
    return subprocess.run(
        [sys.executable, "agent.py"], cwd=HERE, env=env,
        input=json.dumps(envelope), capture_output=True, text=True,
    )


class GreetTest(unittest.TestCase):
    def test_greets_by_name(self):
        done = run({"name": "Ada"})
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(json.loads(done.stdout), {"greeting": "Hello, Ada!"})

    def test_an_empty_name_fails(self):
        done = run({"name": " "})
        self.assertEqual(done.returncode, 1)
        self.assertIn("params.name", done.stderr)

    def test_retry_once_asks_for_a_retry_then_completes(self):
        self.assertEqual(run({"name": "Ada", "retry_once": True}).returncode, 75)
        self.assertEqual(run({"name": "Ada", "retry_once": True}, attempt="2").returncode, 0)


if __name__ == "__main__":
    unittest.main()
