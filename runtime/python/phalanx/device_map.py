"""Stable logical GPU ids across restarts: the job-wide task → devices table.

The same rules as the C++ ``DeviceMap`` (``runtime/clique/device_map.h``; both are pinned to the
cases in ``runtime/clique/testdata/device_tables.txt``): every task reports its GPUs' UUIDs in
CUDA ordinal order; a task's logical ids 0..n-1 go in ascending UUID order, so they depend only on
how many GPUs it has. A task restarted on other GPUs (a replacement on another node) keeps its
logical ids, and the same GPU keeps its logical id whatever ``CUDA_VISIBLE_DEVICES`` orders.
Every task computes the same table from the same reports.

    table = phalanx.device_map.exchange(client, uuids, "devices/<epoch>")
    mine = [e for e in table if e.task_id == client.task_id]   # logical id -> CUDA ordinal
"""

import collections

__all__ = ["DeviceEntry", "build_device_table", "exchange", "local_gpu_uuids"]

DeviceEntry = collections.namedtuple(
    "DeviceEntry", ["task_id", "logical_id", "global_index", "cuda_ordinal", "uuid"])
DeviceEntry.__doc__ = """One GPU of the job: ``cuda_ordinal`` is what the task passes to
``torch.cuda.set_device``; ``global_index`` its position in the job-wide table."""


def build_device_table(reports):
    """``reports``: ``(task_id, [uuid, ...])`` pairs in any order. Returns the entries sorted by
    (task, logical id). ValueError (the C++ messages) for a negative or repeated task id, an empty
    UUID, or a UUID reported twice."""
    owner = {}
    table = []
    seen_tasks = set()
    for task_id, uuids in sorted(reports, key=lambda r: r[0]):
        if task_id < 0:
            raise ValueError("negative task id %d" % task_id)
        if task_id in seen_tasks:
            raise ValueError("task %d reported twice" % task_id)
        seen_tasks.add(task_id)
        ordinals = sorted(range(len(uuids)), key=lambda i: uuids[i])
        for logical, ordinal in enumerate(ordinals):
            uuid = uuids[ordinal]
            if not uuid:
                raise ValueError("task %d: empty UUID for CUDA ordinal %d" % (task_id, ordinal))
            if uuid in owner:
                raise ValueError("GPU %s reported by task %d and task %d"
                                 % (uuid, owner[uuid], task_id))
            owner[uuid] = task_id
            table.append(DeviceEntry(task_id, logical, len(table), ordinal, uuid))
    return table


def local_gpu_uuids():
    """This process's GPUs' UUIDs in CUDA ordinal order, where torch can say (its device
    properties carry ``uuid`` from torch 2.0); ``[]`` without CUDA or on an older torch."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    uuids = []
    for ordinal in range(torch.cuda.device_count()):
        uuid = getattr(torch.cuda.get_device_properties(ordinal), "uuid", None)
        if uuid is None:
            return []
        text = str(uuid)
        uuids.append(text if text.startswith("GPU-") else "GPU-" + text)
    return uuids


def exchange(client, uuids, prefix, timeout=60.0, tasks=None):
    """Publishes this task's ``uuids`` under ``prefix`` in the job's key-value store, waits for
    every task (a barrier), and returns the table every task computes alike. Use a ``prefix`` per
    membership (e.g. per incarnation epoch), so a replacement's report never mixes with the one
    of the process it replaced. ``tasks``: the tasks that take part (default: every task)."""
    prefix = prefix.rstrip("/")
    client.kv_set("%s/%d" % (prefix, client.task_id), ",".join(uuids), overwrite=True)
    client.barrier("%s/published" % prefix, timeout=timeout, tasks=tasks)
    reports = []
    for key, value in client.kv_dir(prefix):
        last = key.rsplit("/", 1)[1]
        if last.isdigit():
            text = value.decode("utf-8") if isinstance(value, bytes) else value
            reports.append((int(last), [u for u in text.split(",") if u]))
    return build_device_table(reports)
