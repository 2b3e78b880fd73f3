"""phalanx.launch, the in-pod launcher (issue 18), with real processes and real signals: each
local rank's environment, an in-place restart as the next incarnation, the exit codes that end
the pod (fatal, preempted, all done), SIGTERM forwarded to every rank, exec with one rank, and
clear errors for a bad environment. The ranks are small Python scripts; the torch job under the
launcher on the local cluster is test_torch_localcluster's TorchSeveralRanksPerPodTest."""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

TIMEOUT = 60  # a bound for a loaded machine; nothing here asserts speed

# A rank: prints its environment, then does what $RANK_ACTION says for its task. Each line is
# one write(2), as the examples write theirs: the ranks share the launcher's stdout pipe, and
# print() under PYTHONUNBUFFERED (set in this machine's shells and in the test pods' manifests)
# writes the text and its newline apart, so two ranks' lines could run into one.
RANK = textwrap.dedent("""
    import os, signal, sys, time
    def say(line):
        os.write(1, (line + "\\n").encode())
    names = ["PHALANX_TASK_ID", "PHALANX_INCARNATION", "PHALANX_TOKEN_FILE",
             "PHALANX_CLIQUE_TICKET_FILE", "RANK",
             "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "JAX_PROCESS_ID"]
    say("RANK " + " ".join("%s=%s" % (n, os.environ.get(n)) for n in names)
        + " pid=%d argv=%s main=%s" % (os.getpid(), ",".join(sys.argv[1:]) or "-",
                                       __name__ == "__main__"))
    task, inc = int(os.environ["PHALANX_TASK_ID"]), int(os.environ["PHALANX_INCARNATION"])
    action = os.environ.get("RANK_ACTION", "exit0")
    if action == "crash_first" and task == 3 and inc % 1000 == 0:
        sys.exit(1)
    if action == "crash_late" and task == 3 and inc % 1000 == 0:
        time.sleep(1)  # the launcher has started its standby by then (--standby_delay 0)
        sys.exit(1)
    if action == "crash_late" and task == 3:
        sys.exit(7 if os.environ.get("SECOND_EXIT") and inc % 1000 == 1 else 0)
    if action in ("fatal", "device_failed") and task == 2:
        deadline = time.monotonic() + TIMEOUT_S  # exits once rank 3 can take its SIGTERM
        while not os.path.exists(os.environ["READY_DIR"] + "/3") and time.monotonic() < deadline:
            time.sleep(0.05)
        sys.exit(2 if action == "fatal" else 5)
    if action == "preempted":
        sys.exit(4)
    if action in ("fatal", "device_failed", "wait_term"):
        signal.signal(signal.SIGTERM, lambda *_: (say("TERM task=%d" % task),
                                                  sys.exit(0)))
        open(os.environ["READY_DIR"] + "/%d" % task, "w").close()
        time.sleep(TIMEOUT_S)
        sys.exit(9)
""").replace("TIMEOUT_S", str(TIMEOUT))


class LaunchTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="phalanx-launch-test-")
        self.script = os.path.join(self.dir, "rank.py")
        with open(self.script, "w") as f:
            f.write(RANK)

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHALANX_", "RANK"))}
        env.update(harness.package_env())
        env.update(PHALANX_TASK_ID="2", PHALANX_NUM_TASKS="4", PHALANX_NPROC_PER_NODE="2",
                   PHALANX_INCARNATION="5", PHALANX_TOKEN_FILE="/var/run/phalanx/token/token-2",
                   PHALANX_CLIQUE_TICKET_FILE="/var/run/phalanx/clique/ticket-2",
                   READY_DIR=self.dir)
        env.update(extra)
        return env

    def launch(self, env, args=()):
        return subprocess.Popen([sys.executable, "-m", "phalanx.launch"] + list(args)
                                + [sys.executable, self.script], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def finish(self, proc):
        out, err = proc.communicate(timeout=TIMEOUT)
        return proc.returncode, out.decode(), err.decode()

    @staticmethod
    def ranks(out):
        return [dict(kv.split("=", 1) for kv in line.split()[1:])
                for line in out.splitlines() if line.startswith("RANK ")]

    def test_each_local_rank_is_its_own_task(self):
        code, out, err = self.finish(self.launch(self.env()))
        self.assertEqual(code, 0, err)
        ranks = sorted(self.ranks(out), key=lambda r: r["PHALANX_TASK_ID"])
        self.assertEqual([r["PHALANX_TASK_ID"] for r in ranks], ["2", "3"])
        self.assertEqual([r["RANK"] for r in ranks], ["2", "3"])
        self.assertEqual([r["JAX_PROCESS_ID"] for r in ranks], ["2", "3"])
        self.assertEqual([r["LOCAL_RANK"] for r in ranks], ["0", "1"])
        self.assertEqual({r["WORLD_SIZE"] for r in ranks}, {"4"})
        self.assertEqual({r["LOCAL_WORLD_SIZE"] for r in ranks}, {"2"})
        self.assertEqual({r["GROUP_RANK"] for r in ranks}, {"1"})
        self.assertEqual({r["PHALANX_INCARNATION"] for r in ranks}, {"5000"})
        self.assertEqual([r["PHALANX_TOKEN_FILE"] for r in ranks],
                         ["/var/run/phalanx/token/token-2", "/var/run/phalanx/token/token-3"])
        self.assertEqual([r["PHALANX_CLIQUE_TICKET_FILE"] for r in ranks],
                         ["/var/run/phalanx/clique/ticket-2", "/var/run/phalanx/clique/ticket-3"])
        self.assertIn("local rank 1 (task 3) finished", err)

    def test_a_dead_rank_is_restarted_in_place_as_its_next_incarnation(self):
        code, out, err = self.finish(self.launch(self.env(RANK_ACTION="crash_first")))
        self.assertEqual(code, 0, err)
        task3 = [r["PHALANX_INCARNATION"] for r in self.ranks(out) if r["PHALANX_TASK_ID"] == "3"]
        self.assertEqual(task3, ["5000", "5001"])
        task2 = [r for r in self.ranks(out) if r["PHALANX_TASK_ID"] == "2"]
        self.assertEqual(len(task2), 1, "the healthy rank was not restarted")
        self.assertIn("local rank 1 (task 3) ended with exit code 1: restarting it in place as "
                      "incarnation 5001", err)

    def test_a_dead_rank_is_replaced_by_the_warm_standby(self):
        """Issue 35 item 1: the replacement is the standby process (the launcher's log names its
        pid), it runs the rank's script as __main__ with the rank's arguments and environment,
        and its exit status is the script's."""
        env = self.env(RANK_ACTION="crash_late")
        code, out, err = self.finish(self.launch(env, ["--standby_delay", "0"]))
        self.assertEqual(code, 0, err)
        task3 = [r for r in self.ranks(out) if r["PHALANX_TASK_ID"] == "3"]
        self.assertEqual([r["PHALANX_INCARNATION"] for r in task3], ["5000", "5001"], out)
        replacement = task3[1]
        self.assertIn("local rank 1: task 3, incarnation 5001, pid %s (the warm standby)"
                      % replacement["pid"], err)
        self.assertEqual(replacement["RANK"], "3")
        self.assertEqual(replacement["argv"], "-")
        self.assertEqual(replacement["main"], "True")
        self.assertEqual(replacement["PHALANX_TOKEN_FILE"], "/var/run/phalanx/token/token-3")
        # The script's exit status is the process's: the standby's 7 is a failure like any.
        code, out, err = self.finish(self.launch(dict(env, SECOND_EXIT="1"),
                                                 ["--standby_delay", "0"]))
        self.assertEqual(code, 0, err)
        self.assertIn("incarnation 5001, pid", err)
        self.assertIn("local rank 1 (task 3) ended with exit code 7: restarting it in place as "
                      "incarnation 5002", err)

    def test_no_standby_starts_every_replacement_cold(self):
        code, out, err = self.finish(self.launch(self.env(RANK_ACTION="crash_late"),
                                                 ["--no_standby"]))
        self.assertEqual(code, 0, err)
        self.assertNotIn("warm standby", err)

    def test_a_fatal_exit_code_stops_the_other_ranks_and_ends_the_pod_with_it(self):
        code, out, err = self.finish(self.launch(self.env(RANK_ACTION="fatal")))
        self.assertEqual(code, 2, err)
        self.assertIn("TERM task=3", out)
        self.assertIn("ended with fatal exit code 2: stopping the pod", err)

    def test_a_rank_whose_gpu_failed_ends_the_pod_with_5_instead_of_a_restart_in_place(self):
        code, out, err = self.finish(self.launch(self.env(RANK_ACTION="device_failed")))
        self.assertEqual(code, 5, err)
        self.assertIn("TERM task=3", out)
        self.assertIn("local rank 0 (task 2) left a failed GPU (exit code 5)", err)
        self.assertNotIn("restarting", err)

    def test_ranks_that_left_for_a_preemption_end_the_pod_with_4(self):
        code, _, err = self.finish(self.launch(self.env(RANK_ACTION="preempted")))
        self.assertEqual(code, 4, err)
        self.assertNotIn("restarting", err)

    def test_sigterm_is_forwarded_to_every_rank(self):
        proc = self.launch(self.env(RANK_ACTION="wait_term"))
        ready = lambda: all(os.path.exists(os.path.join(self.dir, t)) for t in ("2", "3"))
        self.assertTrue(harness.eventually(ready, TIMEOUT), "the ranks did not start")
        proc.send_signal(signal.SIGTERM)
        code, out, err = self.finish(proc)
        self.assertEqual(code, 128 + signal.SIGTERM, err)
        self.assertIn("TERM task=2", out)
        self.assertIn("TERM task=3", out)
        self.assertNotIn("restarting", err)

    def test_one_rank_per_pod_becomes_the_command(self):
        proc = self.launch(self.env(PHALANX_NPROC_PER_NODE="1", PHALANX_TASK_ID="1",
                                    PHALANX_INCARNATION="3"))
        code, out, err = self.finish(proc)
        self.assertEqual(code, 0, err)
        ranks = self.ranks(out)
        self.assertEqual(len(ranks), 1)
        self.assertEqual(ranks[0]["pid"], str(proc.pid))  # exec: no supervisor in between
        self.assertEqual(ranks[0]["PHALANX_INCARNATION"], "3")

    def test_a_bad_environment_is_a_clear_error(self):
        env = self.env()
        del env["PHALANX_TASK_ID"]
        code, _, err = self.finish(self.launch(env))
        self.assertNotEqual(code, 0)
        self.assertIn("PHALANX_TASK_ID is not set", err)
        code, _, err = self.finish(self.launch(self.env(PHALANX_TASK_ID="3")))
        self.assertIn("does not fit a job of 4 tasks", err)
        code, _, err = self.finish(subprocess.Popen(
            [sys.executable, "-m", "phalanx.launch"], env=self.env(), stderr=subprocess.PIPE,
            stdout=subprocess.PIPE))
        self.assertEqual(code, 2)
        self.assertIn("no command given", err)


if __name__ == "__main__":
    unittest.main()
