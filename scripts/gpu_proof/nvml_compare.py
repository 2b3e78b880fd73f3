#!/usr/bin/env python3
"""Compares what the agent's NVML reader saw (phalanx-nvml-probe's JSON) with nvidia-ml-py's own
answers on the same machine: the driver, the CUDA version, and per GPU the name, UUID, PCI bus
id, memory and ECC counts. A field that differs means NvmlLoader reads NVML wrongly (a struct
layout, a symbol version, a buffer size).

    nvml_compare.py PROBE_JSON

Prints one line per check (PASS/FAIL) and exits 0 when all agree, 1 when any differs, 77 when
nvidia-ml-py is not installed (the GPU proof's dry run)."""

import json
import sys


def text(value):
    return value.decode() if isinstance(value, bytes) else value


def main():
    with open(sys.argv[1]) as f:
        probe = json.load(f)
    try:
        import pynvml
    except ImportError:
        print("SKIP: nvidia-ml-py (pynvml) is not installed")
        return 77
    if "error" in probe:
        print("FAIL: the probe could not read NVML: %s" % probe["error"])
        return 1
    pynvml.nvmlInit()
    failures = 0

    def check(what, ours, theirs, close=None):
        nonlocal failures
        same = abs(ours - theirs) <= close if close is not None else ours == theirs
        failures += 0 if same else 1
        print("%s: %s: phalanx %r, nvidia-ml-py %r" % ("PASS" if same else "FAIL", what, ours,
                                                      theirs))

    check("driver version", probe["driver_version"], text(pynvml.nvmlSystemGetDriverVersion()))
    check("CUDA driver version", probe["cuda_driver_version"],
          pynvml.nvmlSystemGetCudaDriverVersion())
    count = pynvml.nvmlDeviceGetCount()
    check("device count", len(probe["gpus"]), count)
    for gpu in probe["gpus"][:count]:
        i = gpu["index"]
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        check("gpu %d name" % i, gpu["name"], text(pynvml.nvmlDeviceGetName(h)))
        check("gpu %d uuid" % i, gpu["uuid"], text(pynvml.nvmlDeviceGetUUID(h)))
        check("gpu %d PCI bus id" % i, gpu["pci_bus_id"].lower(),
              text(pynvml.nvmlDeviceGetPciInfo(h).busId).lower())
        check("gpu %d memory total" % i, gpu["memory_total_bytes"],
              pynvml.nvmlDeviceGetMemoryInfo(h).total)
        try:
            temperature = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
            check("gpu %d temperature (within 5 C)" % i, gpu["temperature_c"] or -100,
                  temperature, close=5)
        except pynvml.NVMLError as e:
            check("gpu %d temperature unsupported" % i, gpu["temperature_c"], None)
            print("  (nvidia-ml-py: %s)" % e)
        for name, kind in (("corrected", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                           ("uncorrected", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
            try:
                theirs = pynvml.nvmlDeviceGetTotalEccErrors(h, kind, pynvml.NVML_VOLATILE_ECC)
            except pynvml.NVMLError_NotSupported:
                theirs = None
            check("gpu %d volatile ECC %s" % (i, name), gpu["ecc_" + name], theirs)
    pynvml.nvmlShutdown()
    xid = probe["xid"]
    polled = xid.get("poll_error") is None and xid.get("registered", 0) + len(
        xid.get("refused", [])) == count
    failures += 0 if polled else 1
    print("%s: XID event set: %s" % ("PASS" if polled else "FAIL", json.dumps(xid)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
