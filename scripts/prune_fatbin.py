#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Shrinks a CUDA shared library for the GPUs of one machine, so that it travels in a small
bundle (scripts/gpu-check.sh prepare carries pip's NCCL this way: 199 MB as shipped, 38 MB
xz-compressed once only sm_80 and sm_90 machine code is left).

usage: prune_fatbin.py INPUT OUTPUT SM [SM ...]
  INPUT   a shared library, or a wheel (the first lib/*.so* member whose name starts
          with the library name given by --member, default libnccl.so)
  SM      compute capabilities whose machine code (SASS) is kept, e.g. 80 90

Every entry of the library's fatbins (.nv_fatbin and __nv_relfatbin) that is not SASS for a
kept capability (PTX, other architectures) has its payload zeroed; the headers and the file's
layout stay as they were, so the loader still parses every entry and picks the kept one, and
the zeros compress to nothing. A GPU without kept SASS cannot run the result.
"""
import argparse
import struct
import sys
import zipfile

FATBIN_MAGIC = 0xBA55ED50
ENTRY_SASS = 2


def sections(image):
    """(name, offset, size) of every ELF64 section."""
    if image[:4] != b"\x7fELF" or image[4] != 2:
        raise ValueError("not an ELF64 file")
    (shoff,) = struct.unpack_from("<Q", image, 0x28)
    entsize, count, names = struct.unpack_from("<HHH", image, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", image, shoff + i * entsize) for i in range(count)]
    strtab = headers[names][4]
    for name, _type, _flags, _addr, offset, size in headers:
        end = image.index(b"\0", strtab + name)
        yield image[strtab + name : end].decode(), offset, size


def entries(image):
    """(kind, sm, payload start, payload bytes) of every entry of the library's fatbins."""
    for name, offset, size in sections(image):
        if name not in (".nv_fatbin", "__nv_relfatbin"):
            continue
        p, end = offset, offset + size
        while p + 16 <= end:
            magic, _version, header, body = struct.unpack_from("<IHHQ", image, p)
            if magic != FATBIN_MAGIC:
                p += 8  # containers are 8-byte aligned
                continue
            q, stop = p + header, p + header + body
            while q < stop:
                kind, _flags, entry_header, payload = struct.unpack_from("<HHIQ", image, q)
                (sm,) = struct.unpack_from("<I", image, q + 28)
                yield kind, sm, q + entry_header, payload
                q += entry_header + payload
            p = stop


def prune(image, keep):
    """Zeroes the payload of every fatbin entry that is not SASS for a capability in `keep`;
    returns (kept bytes, zeroed bytes)."""
    kept_bytes = zeroed = 0
    for kind, sm, start, payload in list(entries(image)):
        if kind == ENTRY_SASS and sm in keep:
            kept_bytes += payload
        else:
            image[start : start + payload] = bytes(payload)
            zeroed += payload
    return kept_bytes, zeroed


def read_input(path, member):
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as wheel:
            names = [n for n in wheel.namelist() if "/lib/" in n and n.rsplit("/", 1)[1].startswith(member)]
            if not names:
                raise ValueError(f"{path} holds no lib/{member}*")
            return bytearray(wheel.read(names[0]))
    with open(path, "rb") as f:
        return bytearray(f.read())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("sm", nargs="+", type=int)
    parser.add_argument("--member", default="libnccl.so")
    args = parser.parse_args()
    try:
        image = read_input(args.input, args.member)
        kept_bytes, zeroed = prune(image, set(args.sm))
    except (OSError, ValueError, struct.error) as error:
        sys.exit(f"prune_fatbin.py: {args.input}: {error}")
    if kept_bytes == 0:
        sys.exit(f"prune_fatbin.py: {args.input} has no SASS for sm {' '.join(map(str, args.sm))}")
    with open(args.output, "wb") as f:
        f.write(image)
    print(f"{args.output}: kept {kept_bytes} bytes of SASS for sm {' '.join(map(str, args.sm))}, zeroed {zeroed}")


if __name__ == "__main__":
    main()
