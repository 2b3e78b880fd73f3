"""End to end on the local cluster: the Python JAX-style example as the tasks of a TrainingJob.

phalanx-localcluster, phalanx-operator, the job's phalanx-coordinator pod and two Python
tasks (examples/jax_style_train.py over libphalanx_c.so) run as real processes. Once task 1
has checkpointed its process is killed; the operator starts incarnation 1, which resumes from
its checkpoint; the job succeeds and both tasks end in the same model state.
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from localcluster_case import KUBECTL, LocalClusterCase  # noqa: E402

sys.path.insert(0, os.path.join(harness.PYTHON_DIR, "examples"))
import jax_style_train  # noqa: E402

EXAMPLE = os.path.join(harness.PYTHON_DIR, "examples", "jax_style_train.py")
JOB = "pytrain"


@unittest.skipUnless(os.path.exists(KUBECTL), "kubectl is not installed at " + KUBECTL)
class LocalClusterE2eTest(LocalClusterCase):
    JOB = JOB
    NODES = 2

    def create_job(self):
        self.apply_python_job(2, [sys.executable, EXAMPLE, "--steps=150", "--step_time=0.04",
                                  "--checkpoint_every=10",
                                  "--checkpoint_dir=" + os.path.join(self.dir, "ckpt")],
                              max_restarts=3)

    def test_killed_python_task_resumes_from_its_checkpoint_and_the_job_succeeds(self):
        self.create_job()
        pod0, pod1, pod1_next = JOB + "-task-0-0", JOB + "-task-1-0", JOB + "-task-1-1"

        # Task 1 has trained and checkpointed at least once (step 10 at the earliest).
        self.assertTrue(harness.eventually(lambda: self.events(pod1, "checkpoint"), 30, 0.2),
                        "no checkpoint from %s; phase=%s\n%s" % (pod1, self.phase(),
                                                                  self.log(pod1)))
        self.admin("kill-pod", "default/" + pod1)

        # The operator replaces only task 1, with incarnation 1, which resumes from a checkpoint.
        self.assertTrue(harness.eventually(lambda: self.events(pod1_next, "start"), 30, 0.2),
                        "%s never started; job=%s" % (pod1_next, json.dumps(self.job())))
        start = self.events(pod1_next, "start")[0]
        self.assertEqual(self.field(start, "inc"), "1", start)
        self.assertGreater(int(self.field(start, "resume_step")), 0, start)

        self.assertTrue(harness.eventually(lambda: self.phase() == "Succeeded", 40, 0.5),
                        "job did not succeed: %s\n%s\n%s" % (
                            json.dumps(self.job()), self.log(pod0), self.log(pod1_next)))

        # The survivor was never restarted: it recovered in place to the same step.
        self.assertEqual(self.log(JOB + "-task-0-1"), "")
        recovered = self.events(pod0, "recovered")
        self.assertTrue(recovered, self.log(pod0))
        self.assertEqual(self.field(recovered[-1], "resume_step"), self.field(start, "resume_step"))
        done0, done1 = self.events(pod0, "done"), self.events(pod1_next, "done")
        self.assertTrue(done0 and done1, self.log(pod0) + self.log(pod1_next))
        self.assertEqual(self.field(done0[0], "steps"), "150")
        self.assertEqual(self.field(done0[0], "state"), self.field(done1[0], "state"))
        state = 0  # what an uninterrupted run ends with
        for step in range(150):
            state = jax_style_train.advance_state(state, step)
        self.assertEqual(self.field(done0[0], "state"), "%016x" % state)
        status = self.job()["status"]
        self.assertEqual(status.get("restarts"), 1, status)
        self.assertEqual([t.get("incarnation") for t in status.get("tasks", [])], [0, 1], status)
        self.passed = True


if __name__ == "__main__":
    unittest.main()
