#!/usr/bin/env python3
"""A pure-Python simulator of PyTorch's CUDA caching allocator at its default
settings (c10/cuda/CUDACachingAllocator.cpp), the yardstick of the pytorch
strategy's speed in BENCHMARKS.md.

It replays a trace in gpualloc's native CSV format (plain or gzip) with the
rules the pytorch strategy follows with PyTorch's defaults: requests rounded
up to 512 bytes; a small pool (rounded size up to 1 MiB) and a large pool
per stream; best fit on (size, address); a new segment of 2 MiB (small),
20 MiB (large, under 10 MiB) or the request rounded up to 2 MiB; the front
of a block handed out and the rest split off when at least 512 bytes remain
(small) or more than 1 MiB (large); a freed block merged with its free
neighbours in its segment; segments kept until the device runs out, then
the free whole segments released and the allocation tried again. Segments
lie at the addresses the simulator's virtual device gives (upward from
0x7f4000000000, 512-byte aligned, never reused), so that ties in best fit go
the same way.

Usage: pysim.py TRACE [CAPACITY_BYTES]
Prints one line: events, peak reserved bytes, device mallocs, OOMs, seconds.
"""

import bisect
import gzip
import sys
import time

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
LARGE_BUFFER = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20
DEVICE_BASE = 0x7F4000000000
DEVICE_SPACING = 1 << 40
ALIGN = 512


class Block:
    __slots__ = ("addr", "size", "free", "prev", "next", "pool", "seg_size")

    def __init__(self, addr, size, pool):
        self.addr, self.size, self.pool = addr, size, pool
        self.free, self.prev, self.next = True, None, None


class Device:
    def __init__(self, index, capacity):
        self.next_addr = DEVICE_BASE + index * DEVICE_SPACING
        self.capacity, self.used = capacity, 0
        self.pools = {}  # (stream, small) -> sorted list of (size, addr, block)
        self.reserved = self.mallocs = 0
        self.segments = []  # first blocks of the segments

    def pool(self, stream, small):
        key = (stream, small)
        p = self.pools.get(key)
        if p is None:
            p = self.pools[key] = []
        return p

    def malloc(self, size):
        if size > self.capacity - self.used:
            return None
        addr = self.next_addr
        self.next_addr = (addr + size + ALIGN - 1) & ~(ALIGN - 1)
        self.used += size
        self.reserved += size
        self.mallocs += 1
        return addr

    def release_cached(self):
        keep = []
        for b in self.segments:
            if b.free and b.prev is None and b.next is None:
                p = b.pool
                p.pop(bisect.bisect_left(p, (b.size, b.addr)))
                self.used -= b.size
                self.reserved -= b.size
            else:
                keep.append(b)
        self.segments = keep


def round_size(size):
    if size < MIN_BLOCK:
        return MIN_BLOCK
    return (size + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK


def segment_size(rounded):
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return (rounded + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE


def alloc(dev, size, stream):
    rounded = round_size(size)
    small = rounded <= SMALL_SIZE
    pool = dev.pool(stream, small)
    i = bisect.bisect_left(pool, (rounded, 0))
    if i < len(pool):
        block = pool.pop(i)[2]
    else:
        seg = segment_size(rounded)
        addr = dev.malloc(seg)
        if addr is None:
            dev.release_cached()
            addr = dev.malloc(seg)
            if addr is None:
                return None
        block = Block(addr, seg, pool)
        dev.segments.append(block)
    rest = block.size - rounded
    if (rest >= MIN_BLOCK) if small else (rest > SMALL_SIZE):
        r = Block(block.addr + rounded, rest, pool)
        r.prev, r.next = block, block.next
        if block.next is not None:
            block.next.prev = r
        block.next = r
        block.size = rounded
        bisect.insort(pool, (r.size, r.addr, r))
    block.free = False
    return block


def free(block):
    pool = block.pool
    block.free = True
    prev, nxt = block.prev, block.next
    if prev is not None and prev.free:
        pool.pop(bisect.bisect_left(pool, (prev.size, prev.addr)))
        prev.size += block.size
        prev.next = nxt
        if nxt is not None:
            nxt.prev = prev
        block = prev
    nxt = block.next
    if nxt is not None and nxt.free:
        pool.pop(bisect.bisect_left(pool, (nxt.size, nxt.addr)))
        block.size += nxt.size
        block.next = nxt.next
        if nxt.next is not None:
            nxt.next.prev = block
    bisect.insort(pool, (block.size, block.addr, block))


def replay(path, capacity):
    opener = open
    with open(path, "rb") as f:
        if f.read(2) == b"\x1f\x8b":
            opener = gzip.open
    devices, live = {}, {}
    events = ooms = 0
    reserved = peak = 0
    with opener(path, "rt") as f:
        cols = None
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.rstrip("\r\n").split(",")
            if cols is None:
                cols = {name.strip().lower(): i for i, name in enumerate(fields)}
                c_op, c_id, c_size = cols["op"], cols["id"], cols["size"]
                c_stream, c_dev = cols.get("stream"), cols.get("device")
                continue
            events += 1
            op, key = fields[c_op].strip().lower(), fields[c_id].strip()
            dev_index = int(fields[c_dev] or 0) if c_dev is not None else 0
            if op == "alloc":
                dev = devices.get(dev_index)
                if dev is None:
                    dev = devices[dev_index] = Device(dev_index, capacity)
                stream = int(fields[c_stream] or 0, 0) if c_stream is not None else 0
                before = dev.reserved
                block = alloc(dev, int(fields[c_size]), stream)
                live[(dev_index, key)] = block
                if block is None:
                    ooms += 1
                reserved += dev.reserved - before
                peak = max(peak, reserved)
            else:
                dev = devices[dev_index]
                before = dev.reserved
                block = live.pop((dev_index, key))
                if block is not None:
                    free(block)
                reserved += dev.reserved - before
    mallocs = sum(d.mallocs for d in devices.values())
    return events, peak, mallocs, ooms


def main():
    capacity = int(sys.argv[2]) if len(sys.argv) > 2 else 80 << 30
    t0 = time.perf_counter()
    events, peak, mallocs, ooms = replay(sys.argv[1], capacity)
    print(events, peak, mallocs, ooms, "%.3f" % (time.perf_counter() - t0))


if __name__ == "__main__":
    main()
