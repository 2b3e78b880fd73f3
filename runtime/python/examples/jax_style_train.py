#!/usr/bin/env python3
"""A JAX-style multi-controller training loop on the Phalanx Python client, without JAX.

Every task runs this program (one process per pod, as with ``jax.distributed``). The "model"
is a 64-bit state advanced deterministically each step (the same function as the C++ sample
worker, examples/sample_worker), so a resumed run ends in exactly the state an uninterrupted
one would. Each step ends in a barrier that stands in for the all-reduce.

What it shows:
  * ``phalanx.init()`` from the environment the operator injects;
  * periodic checkpoints every ``--checkpoint_every`` steps under
    ``<checkpoint_dir>/task-<id>/step-<N>`` (written atomically);
  * recovery after any membership change (at start, after a peer died or came back):
      1. agree on the membership with ``alive_tasks()`` until every task is alive; the epoch
         is a hash of every task's incarnation, so all tasks compute the same epoch;
      2. publish this task's offer under ``recovery/<epoch>/<task>``: every step it can resume
         from (its kept checkpoints and the step it holds in memory) and the step it would reach
         if the step barrier it was waiting in when the coordinator went away was released;
      3. barrier ``recovery/<epoch>``, then resume from the newest step every offer can resume
         from (:func:`agree_resume_step`: the C++ sample worker's rule, pinned to it by the
         cases both read, examples/sample_worker/testdata/recovery_offers.txt). Step barriers
         are ``<epoch>/step-<n>``, fresh per epoch.
  * a coordinator that stops, moves or restarts never fails the task: calls meeting it raise
    ``Unavailable``; the task waits for the client to re-register (``wait_until_connected``),
    re-runs recovery (the new coordinator lost the key-value data and barriers) and goes on;
    ``on_reconnect`` tells it even when no call was in flight;
  * ``reached_sync_point(step)`` every step: when a preemption round opens, every task
    checkpoints at the same agreed step; a task the round names then leaves with exit code 4
    (as a JAX program does at its preemption sync point) and its peers wait for it.

Output: one ``EVENT t_ms=<unix ms> task=<id> inc=<n> kind=<kind> ...`` line per event on
stdout (kinds: connected, start, checkpoint, sync_checkpoint, preemption_notice, peer_failed,
peer_changed, reconnected, recovered, recovery_retry, barrier_failed, shutdown_retry,
left_for_preemption, done, failed).

Exit codes (as the C++ sample worker): 0 done, 2 bad configuration, 3 this incarnation was
superseded (restart it), 4 left at a preemption sync point, 1 any other failure.
"""

import argparse
import hashlib
import os
import sys
import threading
import time

try:
    import phalanx
except ImportError:  # running from a source checkout without PYTHONPATH
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import phalanx

MASK64 = (1 << 64) - 1

EXIT_DONE, EXIT_OTHER, EXIT_BAD_CONFIG, EXIT_SUPERSEDED, EXIT_PREEMPTED = 0, 1, 2, 3, 4


def format_offer(held, pending=None):
    """``held=0,10,19 pending=20``: the steps this task can resume from (step 0 always) and the
    step its unanswered step barrier would have led to."""
    text = "held=" + ",".join(str(s) for s in sorted(set(held) | {0}))
    return text if pending is None else "%s pending=%d" % (text, pending)


def parse_offer(text):
    """(held steps, pending step or None) of an offer, or of a bare step; ValueError for
    anything else."""
    def step(word):
        if not word.isdigit():
            raise ValueError("recovery offer %r: %r is not a step" % (text, word))
        return int(word)
    if text.strip().isdigit():
        return {0, int(text)}, None
    held, pending, saw_held = {0}, None, False
    for field in text.split():
        if field.startswith("held="):
            saw_held = True
            held |= {step(w) for w in field[5:].split(",") if w}
        elif field.startswith("pending="):
            pending = step(field[8:])
        else:
            raise ValueError("recovery offer %r: unknown field %r" % (text, field))
    if not saw_held:
        raise ValueError("recovery offer %r has no held=" % text)
    return held, pending


def agree_resume_step(offers):
    """The newest step every offer (``(held, pending)``) can resume from: a held step, or a
    pending step that some offer holds a step at or past (a task past a step barrier proves
    that barrier was released). Step 0 is common to all."""
    if not offers:
        return 0
    proven = max(max(held) for held, _ in offers)

    def can_resume(offer, step):
        held, pending = offer
        return step == 0 or step in held or (pending == step and step <= proven)
    first_held, first_pending = offers[0]
    candidates = set(first_held) | ({first_pending} if first_pending is not None else set())
    for step in sorted(candidates, reverse=True):
        if all(can_resume(o, step) for o in offers):
            return step
    return 0


def advance_state(state, step):
    """splitmix64 of (state, step): the C++ sample worker's AdvanceState, bit for bit."""
    z = (state + 0x9E3779B97F4A7C15 * (step + 1)) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


class CheckpointStore:
    """``<dir>/task-<id>/step-<N>`` files holding the state in decimal (the C++ worker's
    format); atomic writes (temp file + rename); keeps the newest ``keep``."""

    def __init__(self, directory, task_id, keep=3):
        self.dir = os.path.join(directory, "task-%d" % task_id)
        self.keep = keep

    def steps(self):
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted(int(n[5:]) for n in names if n.startswith("step-") and n[5:].isdigit())

    def latest(self):
        steps = self.steps()
        return steps[-1] if steps else 0

    def save(self, step, state):
        os.makedirs(self.dir, exist_ok=True)
        path = os.path.join(self.dir, "step-%d" % step)
        with open(path + ".tmp", "w") as f:
            f.write("%d\n" % state)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        for old in self.steps()[:-self.keep]:
            try:
                os.remove(os.path.join(self.dir, "step-%d" % old))
            except FileNotFoundError:
                pass

    def load(self, step):
        with open(os.path.join(self.dir, "step-%d" % step)) as f:
            return int(f.read().strip())


class Trainer:
    def __init__(self, args, client):
        self.args = args
        self.client = client
        self.task = client.task_id
        self.inc = client.incarnation
        self.num_tasks = client.num_tasks
        self.store = CheckpointStore(args.checkpoint_dir, self.task)
        self.state = 0
        # Shared with the client's callbacks (session thread) and barrier threads.
        self.cond = threading.Condition()
        self.membership_changes = 0
        self.current_barrier = None
        self.named_in_preemption = False  # True, False, or None (library cannot say)
        self.waiters = []  # barrier threads, joined before the client is closed
        client.on_peer_change(self.on_peer_change)
        client.on_preemption(self.on_preemption)
        if hasattr(client, "on_reconnect"):
            client.on_reconnect(self.on_reconnect)

    # -- events and callbacks (callbacks run on the session thread: quick, no blocking calls) --

    def event(self, kind, fields=""):
        line = "EVENT t_ms=%d task=%d inc=%d kind=%s%s%s\n" % (
            int(time.time() * 1000), self.task, self.inc, kind, " " if fields else "", fields)
        os.write(1, line.encode())  # one write per line: never interleaved, never buffered

    def on_peer_change(self, peer):
        failed = peer.state == phalanx.TaskState.FAILED
        self.event("peer_failed" if failed else "peer_changed",
                   'peer=%d peer_inc=%d state=%s reason="%s"' % (
                       peer.task_id, peer.incarnation, peer.state_name, peer.reason))
        with self.cond:
            self.membership_changes += 1
            barrier = self.current_barrier
            self.cond.notify_all()
        if failed and barrier:
            # Release the peers waiting with us in a barrier the dead task will never reach.
            # cancel_barrier blocks, so not on the session thread.
            threading.Thread(target=self._cancel_quietly, args=(barrier,), daemon=True).start()

    def _cancel_quietly(self, barrier):
        try:
            self.client.cancel_barrier(barrier)
        except phalanx.Error:
            pass

    def on_reconnect(self, coordinator_restarted):
        # A new coordinator has none of the old one's barriers or key-value data: whatever this
        # task waits in is gone, so recover (the barrier wait gives way to a membership change).
        self.event("reconnected", "coordinator_restarted=%d" % (1 if coordinator_restarted else 0))
        with self.cond:
            self.membership_changes += 1
            self.cond.notify_all()

    def on_preemption(self, round_):
        if round_.affected_tasks is None:
            named = None  # this libphalanx_c cannot say which tasks the round names
        else:
            named = self.task in round_.affected_tasks
        with self.cond:
            self.named_in_preemption = named
        self.event("preemption_notice", 'round=%d affects_me=%s reason="%s"' % (
            round_.round, {True: "1", False: "0", None: "unknown"}[named], round_.reason))

    # -- barriers that give way to membership changes --

    def changes(self):
        with self.cond:
            return self.membership_changes

    def await_barrier(self, name, timeout, seen):
        """Barrier ``name``; raises Cancelled as soon as the membership changes from ``seen``
        (a survivor must not wait for a task that is gone)."""
        result = {}
        with self.cond:
            if self.membership_changes != seen:
                raise phalanx.Cancelled("membership changed before the barrier")
            self.current_barrier = name

        def run():
            try:
                self.client.barrier(name, timeout)
                outcome = None
            except phalanx.Error as e:
                outcome = e
            with self.cond:
                result["done"] = outcome
                self.cond.notify_all()

        t = threading.Thread(target=run, daemon=True)
        self.waiters = [w for w in self.waiters if w.is_alive()] + [t]
        t.start()
        with self.cond:
            self.cond.wait_for(lambda: "done" in result or self.membership_changes != seen,
                               timeout + 10)
            self.current_barrier = None
            if "done" in result:
                if result["done"] is not None:
                    raise result["done"]
                return
            if self.membership_changes != seen:
                raise phalanx.Cancelled("membership changed while waiting in " + name)
        raise phalanx.DeadlineExceeded("barrier '%s' did not answer" % name)

    # -- recovery --

    def try_recover_once(self, deadline, offer):
        seen = self.changes()
        alive = self.client.alive_tasks(timeout=max(0.1, min(10.0, deadline - time.time())))
        if len(alive) < self.num_tasks:
            raise phalanx.Unavailable("%d of %d tasks alive" % (len(alive), self.num_tasks))
        incarnations = ".".join(str(t.incarnation) for t in sorted(alive))
        epoch = "e" + hashlib.sha1(incarnations.encode()).hexdigest()[:16]
        self.client.kv_set("recovery/%s/%d" % (epoch, self.task), offer, overwrite=True)
        barrier = "recovery/" + epoch
        self.await_barrier(barrier, max(0.1, min(self.args.barrier_timeout,
                                                 deadline - time.time())), seen)
        published = self.client.kv_dir(barrier)
        if len(published) != self.num_tasks:
            raise phalanx.Unavailable("recovery state incomplete (coordinator restarted?)")
        try:
            offers = [parse_offer(v.decode() if isinstance(v, bytes) else v) for _, v in published]
        except ValueError as e:
            raise phalanx.FailedPrecondition(str(e))  # another build's peer: retrying won't help
        return epoch, agree_resume_step(offers), seen

    def recover(self, step=0, pending=None):
        """Agrees on the step to resume from. ``step``: the step whose state this task holds in
        memory; ``pending``: the step its unanswered step barrier would have led to."""
        offer = format_offer(set(self.store.steps()) | {step},
                             pending[0] if pending is not None else None)
        deadline = time.time() + self.args.recovery_timeout
        while True:
            try:
                return self.try_recover_once(deadline, offer)
            except (phalanx.Aborted, phalanx.FailedPrecondition):
                raise
            except phalanx.Error as e:
                if time.time() >= deadline:
                    raise
                if not isinstance(e, phalanx.Unavailable) or "alive" not in e.message:
                    self.event("recovery_retry", 'reason="%s"' % e.message)
                if isinstance(e, phalanx.Unavailable):
                    self.wait_for_coordinator(deadline)
                time.sleep(0.2)  # a peer is not back yet, or the coordinator is restarting

    def wait_for_coordinator(self, deadline):
        """After ``Unavailable``: wait (bounded by ``deadline``) until the client has
        re-registered this task with the coordinator, old or new."""
        try:
            self.client.wait_until_connected(max(0.1, deadline - time.time()))
        except phalanx.DeadlineExceeded:
            pass  # the caller's own deadline check decides

    def shutdown(self):
        """The shutdown barrier, re-entered when the coordinator restarts during it."""
        deadline = time.time() + self.args.recovery_timeout
        while True:
            try:
                self.client.shutdown(timeout=max(1.0, deadline - time.time()))
                return
            except phalanx.Unavailable as e:
                if time.time() >= deadline:
                    raise
                self.event("shutdown_retry", 'reason="%s"' % e.message)
                self.wait_for_coordinator(deadline)

    def checkpoint(self, step, why):
        self.store.save(step, self.state)
        self.event("checkpoint", "step=%d why=%s" % (step, why))

    def restore(self, step):
        self.state = self.store.load(step) if step > 0 else 0

    # -- the loop --

    def run(self):
        """Returns the exit code."""
        self.event("connected")
        epoch, step, seen = self.recover()
        self.restore(step)
        self.event("start", "resume_step=%d epoch=%s" % (step, epoch))
        barrier_failed = False
        coordinator_lost = False
        pending = None  # (step, state) a step barrier that ended unanswered would have led to
        while step < self.args.steps:
            # The sync point before a membership change: the task a round names checkpoints
            # at the agreed step and leaves at once, so its failure may reach us after the
            # previous step's barrier but before this check. The state at `step` is complete,
            # so checkpoint it first; recovery then resumes from it (no step lost).
            try:
                sync = self.client.reached_sync_point(step)
            except phalanx.Aborted:
                raise
            except phalanx.Error as e:
                self.event("sync_failed", 'reason="%s"' % e.message)
                sync = False
            if sync:
                self.checkpoint(step, "preemption")
                self.event("sync_checkpoint", "step=%d" % step)
                with self.cond:
                    named = self.named_in_preemption
                if named:
                    # This task's node is going away: leave now rather than train steps its
                    # eviction would throw away. Its peers wait at this step.
                    self.event("left_for_preemption", "step=%d" % step)
                    return EXIT_PREEMPTED

            if barrier_failed or coordinator_lost or self.changes() != seen:
                next_epoch, resume, seen = self.recover(step, pending)
                if next_epoch == epoch:
                    if barrier_failed:
                        # Same membership yet the step barrier failed (a straggler timed out):
                        # a collective timeout, which real training cannot survive in place.
                        message = "step %d barrier failed twice" % step
                        self.client.report_error(message)
                        raise phalanx.Internal(message)
                else:
                    self.event("recovered", "from_step=%d resume_step=%d lost=%d epoch=%s" % (
                        step, resume, step - resume, next_epoch))
                    if pending is not None and resume == pending[0]:
                        # A peer reached this step, so the barrier before it was released:
                        # keep its state.
                        self.state = pending[1]
                        self.checkpoint(resume, "released")
                    elif resume != step:
                        self.restore(resume)
                    step, epoch = resume, next_epoch
                barrier_failed = coordinator_lost = False
                pending = None
                continue

            time.sleep(self.args.step_time)  # "compute"
            next_state = advance_state(self.state, step)
            try:
                self.await_barrier("%s/step-%d" % (epoch, step), self.args.barrier_timeout, seen)
            except phalanx.Aborted:
                raise
            except phalanx.Error as e:
                self.event("barrier_failed", 'step=%d code=%s reason="%s"' % (
                    step, type(e).__name__, e.message))
                # Offered as pending: it counts only if a peer proves the barrier released
                # (this task may never have arrived; then no peer can be past it).
                pending = (step + 1, next_state)
                if isinstance(e, phalanx.Unavailable):
                    # The coordinator stopped, moved or restarted: never a failure. Recovery
                    # waits for the client to re-register and agrees on the step again.
                    coordinator_lost = True
                    continue
                # A membership change is handled by recovery; only a failure with the
                # membership unchanged (a timeout) counts against the barrier.
                barrier_failed = self.changes() == seen
                continue
            self.state = next_state
            step += 1
            if step % self.args.checkpoint_every == 0 or step == self.args.steps:
                self.checkpoint(step, "periodic")
        self.shutdown()
        self.event("done", "steps=%d state=%016x" % (step, self.state))
        return EXIT_DONE

    def close(self):
        for w in self.waiters:
            w.join(5)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=100, help="steps to train")
    p.add_argument("--step_time", type=float, default=0.02, help="simulated compute, seconds")
    p.add_argument("--checkpoint_every", type=int, default=10, help="checkpoint period in steps")
    p.add_argument("--checkpoint_dir", default="/tmp/phalanx-checkpoints")
    p.add_argument("--barrier_timeout", type=float, default=60.0, help="seconds")
    p.add_argument("--connect_timeout", type=float, default=60.0, help="seconds")
    p.add_argument("--recovery_timeout", type=float, default=120.0, help="seconds")
    return p.parse_args(argv)


def main(argv=None):
    try:
        args = parse_args(argv)
    except SystemExit as e:
        return EXIT_BAD_CONFIG if e.code else EXIT_DONE
    if args.steps < 1 or args.checkpoint_every < 1:
        sys.stderr.write("jax_style_train: --steps and --checkpoint_every must be at least 1\n")
        return EXIT_BAD_CONFIG
    try:
        client = phalanx.init(connect=False)
    except (phalanx.InvalidArgument, phalanx.LibraryNotFound) as e:
        sys.stderr.write("jax_style_train: %s\n" % e)
        return EXIT_BAD_CONFIG
    trainer = Trainer(args, client)  # registers its callbacks before connecting
    code = EXIT_OTHER
    try:
        client.connect(args.connect_timeout)
        code = trainer.run()
    except (phalanx.Unauthenticated, phalanx.PermissionDenied, phalanx.InvalidArgument) as e:
        trainer.event("fatal", 'reason="%s"' % e.message)
        code = EXIT_BAD_CONFIG  # a restart will not fix a wrong token or job
    except phalanx.Aborted as e:
        trainer.event("fatal", 'reason="%s"' % e.message)
        code = EXIT_SUPERSEDED
    except (phalanx.Error, OSError, ValueError) as e:
        trainer.event("failed", 'reason="%s"' % e)
        sys.stderr.write("jax_style_train: %s\n" % e)
        code = EXIT_OTHER
    if code == EXIT_SUPERSEDED:
        os._exit(code)  # barrier threads may still be inside the superseded client
    trainer.close()
    if any(w.is_alive() for w in trainer.waiters):
        os._exit(code)  # never free the client under a call still in flight
    phalanx.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
