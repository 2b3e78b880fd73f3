"""phalanx.device_map: the job-wide task → devices table in Python, pinned to the C++ DeviceMap by
the cases both read (runtime/clique/testdata/device_tables.txt), and exchanged through a real
coordinator: every task gets the same table, and a replacement on other GPUs keeps its logical
ids."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (sets PHALANX_LIBRARY before phalanx loads it)

sys.path.insert(0, harness.PYTHON_DIR)
import phalanx  # noqa: E402
from phalanx import device_map  # noqa: E402
from test_client import in_thread  # noqa: E402

CASES = os.path.join(harness.REPO, "runtime", "clique", "testdata", "device_tables.txt")


def shared_cases():
    """(name, reports, expected entries or None, error text or None) from the shared file."""
    cases, current = [], None
    with open(CASES) as f:
        for line in f:
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            verb, rest = words[0], words[1:]
            if verb == "case":
                current = {"name": rest[0], "reports": [], "expect": [], "error": None}
            elif verb == "report":
                current["reports"].append((int(rest[0]), rest[1:]))
            elif verb == "expect":
                current["expect"].append(device_map.DeviceEntry(
                    int(rest[0]), int(rest[1]), int(rest[2]), int(rest[3]), rest[4]))
            elif verb == "error":
                current["error"] = line.split(None, 1)[1].strip()
            elif verb == "end":
                cases.append(current)
    return cases


class DeviceMapTest(unittest.TestCase):
    def test_the_cases_shared_with_the_cpp_device_map(self):
        cases = shared_cases()
        self.assertGreaterEqual(len(cases), 5)
        for case in cases:
            with self.subTest(case["name"]):
                if case["error"]:
                    with self.assertRaisesRegex(ValueError, case["error"]):
                        device_map.build_device_table(case["reports"])
                else:
                    self.assertEqual(device_map.build_device_table(case["reports"]),
                                     case["expect"])
                    # In any order: every task computes the same table.
                    self.assertEqual(device_map.build_device_table(case["reports"][::-1]),
                                     case["expect"])

    def test_exchanged_through_the_coordinator_every_task_gets_the_same_table(self):
        coordinator = harness.Coordinator(num_tasks=2, job="devices")
        self.addCleanup(coordinator.close)

        def client(task, incarnation):
            env = coordinator.env(task, incarnation)
            c = phalanx.Client(env["PHALANX_COORDINATOR"], env["PHALANX_JOB"], task, 2,
                               incarnation, env["PHALANX_TOKEN"])
            self.addCleanup(c.close)
            c.connect(timeout=20)
            return c
        first = [client(0, 0), client(1, 0)]
        gpus = {0: ["GPU-a", "GPU-b"], 1: ["GPU-d", "GPU-c"]}
        other = in_thread(device_map.exchange, first[1], gpus[1], "devices/0.0", 20)
        mine = device_map.exchange(first[0], gpus[0], "devices/0.0", 20)
        self.assertEqual(mine, other())
        self.assertEqual([(e.task_id, e.logical_id, e.cuda_ordinal, e.uuid)
                          for e in mine if e.task_id == 1], [(1, 0, 1, "GPU-c"), (1, 1, 0, "GPU-d")])

        # Task 1 comes back on another node's GPUs: its logical ids, and task 0's entries, hold.
        replacement = client(1, 1)
        again = in_thread(device_map.exchange, replacement, ["GPU-z", "GPU-y"], "devices/0.1", 20)
        after = device_map.exchange(first[0], gpus[0], "devices/0.1", 20)
        self.assertEqual(after, again())
        self.assertEqual([e.logical_id for e in after if e.task_id == 1], [0, 1])
        self.assertEqual([e for e in after if e.task_id == 0], [e for e in mine if e.task_id == 0])

    def test_without_cuda_there_are_no_local_uuids(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch is not installed")
        if torch.cuda.is_available():
            self.skipTest("this machine has CUDA")
        self.assertEqual(device_map.local_gpu_uuids(), [])


if __name__ == "__main__":
    unittest.main()
