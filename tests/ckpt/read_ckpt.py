#!/usr/bin/env python3
"""Reads a meshtrain checkpoint with h5py and numpy alone — an implementation independent of
meshtrain's C — and verifies every array's checksum as docs/checkpoints.md defines it.
usage: read_ckpt.py FILE   (exit 0: every checksum matches; 1: one does not; 77: no h5py/numpy)"""
import sys

try:
    import h5py
    import numpy as np
except ImportError:
    print("skip: python3 cannot import h5py and numpy")
    sys.exit(77)

def mix(z):  # splitmix64's output function of z + 0x9e3779b97f4a7c15, on uint64 arrays
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))

def checksum(a):  # a: float32 array as stored
    g = np.arange(a.size, dtype=np.uint64)
    u = a.reshape(-1).view(np.uint32).astype(np.uint64)
    with np.errstate(over="ignore"):
        return int(mix(g * np.uint64(0x9E3779B97F4A7C15) + u).sum(dtype=np.uint64))

bad = []
with h5py.File(sys.argv[1], "r") as f:
    assert f.attrs["format"] == b"meshtrain-checkpoint", f.attrs["format"]
    print({k: f.attrs[k] for k in ("version", "step", "tokens_seen", "seed", "layers", "d_model")})

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            a = obj[...]
            ok = checksum(a) == int(obj.attrs["checksum"]) % 2**64
            bad.extend([] if ok else [name])
            print(f"{name:24s} {str(a.shape):16s} L2 {np.linalg.norm(a):<12.6g} "
                  f"checksum {'ok' if ok else 'MISMATCH'}")

    f.visititems(visit)
print(f"{len(bad)} checksum mismatch(es)")
sys.exit(1 if bad else 0)
