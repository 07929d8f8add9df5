#!/usr/bin/python3
# tests/ketama_vectors.py — the expected servers pinned in test_placement.c,
# computed independently of librkv from twemproxy's ketama (nc_ketama.c):
# float32 share arithmetic, "NAME-i" MD5 point groups, first point >= the
# key's md5 hash. Run by hand when adding a vector; the test does not run it.
import hashlib
import struct


def f32(x):
    return struct.unpack('f', struct.pack('f', x))[0]


def md5_word(data, a):
    return struct.unpack_from('<I', hashlib.md5(data).digest(), 4 * a)[0]


def points(weight, total, n):
    share = f32(f32(weight) / f32(total))
    groups = f32(f32(f32(share * 160.0) / 4.0) * f32(n))
    return int(f32(float(int(f32(groups + 0.0000000001) // 1)) * 4.0))


def continuum(servers):
    total = sum(w for _, w in servers)
    ring = []
    for i, (name, w) in enumerate(servers):
        for g in range(points(w, total, len(servers)) // 4):
            label = ('%s-%d' % (name, g)).encode()
            ring += [(md5_word(label, a), i) for a in range(4)]
    return sorted(ring)


def owner(ring, key):
    h = md5_word(key, 0)
    for value, server in ring:
        if value >= h:
            return server
    return ring[0][1]


CONFIGS = {
    'even3': [('127.0.0.1:22122', 1), ('127.0.0.1:22123', 1), ('127.0.0.1:22124', 1)],
    'weighted': [('alpha', 1), ('beta', 2), ('gamma', 5), ('delta', 3)],
    'default_port': [('10.0.0.1', 1), ('10.0.0.2', 1)],
}
KEYS = [b'a', b'key', b'foo', b'bar', b'user:1000', b'user:1001', b'session-42',
        b'0123456789abcdef', b'\x00\xff binary', b'x' * 250]

for cname, servers in CONFIGS.items():
    ring = continuum(servers)
    total = sum(w for _, w in servers)
    print(cname, 'points', [points(w, total, len(servers)) for _, w in servers], 'ring', len(ring))
    print('  first', ['0x%08x/%d' % p for p in ring[:3]])
    print('  owners', [owner(ring, k) for k in KEYS])
