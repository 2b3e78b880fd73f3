"""The example programs' start-up contract: bad configuration exits 2 with a message saying
what to fix; the torch example exits 2 when torch is missing and otherwise runs (world of 1).
The JAX-style example's recovery is covered by test_e2e_localcluster.py."""

import os
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

EXAMPLES = os.path.join(harness.PYTHON_DIR, "examples")


def run(script, args=(), env=None):
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("PHALANX_") and k not in ("MASTER_ADDR", "MASTER_PORT",
                                                           "WORLD_SIZE", "RANK")}
    base.update(PHALANX_LIBRARY=harness.LIBRARY, PYTHONPATH=harness.PYTHON_DIR)
    base.update(env or {})
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, script)] + list(args),
                          env=base, capture_output=True, timeout=120)


def torch_available():
    return subprocess.run([sys.executable, "-c", "import torch"], capture_output=True,
                          timeout=120).returncode == 0


class ExamplesTest(unittest.TestCase):
    def test_jax_style_without_phalanx_env_exits_2_naming_the_variable(self):
        out = run("jax_style_train.py")
        self.assertEqual(out.returncode, 2, out)
        self.assertIn(b"PHALANX_COORDINATOR", out.stderr)

    def test_jax_style_with_bad_flags_exits_2(self):
        self.assertEqual(run("jax_style_train.py", ["--steps=0"]).returncode, 2)
        self.assertEqual(run("jax_style_train.py", ["--no_such_flag"]).returncode, 2)

    def test_jax_style_with_a_wrong_token_exits_2(self):
        coordinator = harness.Coordinator(num_tasks=1)
        try:
            out = run("jax_style_train.py", ["--steps=3"],
                      coordinator.env(0, token="wrong-token"))
        finally:
            coordinator.close()
        self.assertEqual(out.returncode, 2, out)
        self.assertIn(b"kind=fatal", out.stdout)

    def test_jax_style_single_task_runs_to_done(self):
        coordinator = harness.Coordinator(num_tasks=1)
        with tempfile.TemporaryDirectory() as ckpt:
            try:
                out = run("jax_style_train.py", ["--steps=12", "--step_time=0",
                                                 "--checkpoint_every=5", "--checkpoint_dir=" + ckpt],
                          coordinator.env(0))
            finally:
                coordinator.close()
            self.assertEqual(out.returncode, 0, out)
            self.assertIn(b"kind=done steps=12", out.stdout)
            self.assertEqual(sorted(os.listdir(os.path.join(ckpt, "task-0"))),
                             ["step-10", "step-12", "step-5"])

    @unittest.skipIf(torch_available(), "torch is installed: see the world-of-1 test")
    def test_torch_example_without_torch_says_so_and_exits_2(self):
        out = run("torch_elastic_train.py")
        self.assertEqual(out.returncode, 2, out)
        self.assertIn(b"PyTorch is not installed", out.stderr)

    @unittest.skipUnless(torch_available(), "torch is not installed")
    def test_torch_example_runs_a_world_of_one_on_gloo(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with tempfile.TemporaryDirectory() as ckpt:
            out = run("torch_elastic_train.py", ["--steps=5", "--checkpoint_dir=" + ckpt],
                      {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "1",
                       "RANK": "0"})
        self.assertEqual(out.returncode, 0, out)
        self.assertIn(b"kind=done steps=5", out.stdout)


if __name__ == "__main__":
    unittest.main()
