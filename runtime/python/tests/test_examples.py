"""The example programs' start-up contract: bad configuration exits 2 with a message saying
what to fix; the torch example exits 2 when torch is missing and otherwise runs (world of 1).
The JAX-style example's recovery is covered by test_e2e_localcluster.py; its recovery rule is
pinned here to the C++ sample worker's by the cases both read."""

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


OFFER_CASES = os.path.join(harness.REPO, "examples", "sample_worker", "testdata",
                           "recovery_offers.txt")


class RecoveryRuleTest(unittest.TestCase):
    """jax_style_train's agree_resume_step against the C++ AgreeResumeStep's shared cases."""

    def test_the_shared_cases_resume_where_the_cpp_worker_does(self):
        sys.path.insert(0, EXAMPLES)
        import jax_style_train as jst
        cases = 0
        with open(OFFER_CASES) as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                offers, want = line.split(" => ")
                parsed = [jst.parse_offer(o) for o in offers.split(" | ")]
                self.assertEqual(jst.agree_resume_step(parsed), int(want), line)
                cases += 1
        self.assertGreaterEqual(cases, 9)
        self.assertEqual(jst.agree_resume_step([]), 0)
        self.assertEqual(jst.format_offer({10, 19}, 20), "held=0,10,19 pending=20")
        self.assertEqual(jst.parse_offer(jst.format_offer({10, 19}, 20)), ({0, 10, 19}, 20))
        for bad in ["", "-3", "held=1,x", "held=1 pending=-2", "held=1 later=3", "pending=3"]:
            with self.assertRaises(ValueError, msg=bad):
                jst.parse_offer(bad)


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
