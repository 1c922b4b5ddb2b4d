"""ampc_random.py - ampc's random numbers in PyTorch, for the reference models of the benchmarks.

Philox4x32-10 keyed as in docs/plan-format.md (the seed, a step, a stream named by the FNV-1a hash
of a string, the element index as the counter), vectorised over int64 tensors of 32-bit words:
the normal initial values of ampc's initializeParameters and the integer ids of its
randomizeInputs, the same numbers an ampc training executable draws for the seed.
"""

import math

import torch


class AmpcRandom:
    MASK = 0xFFFFFFFF
    M0, M1 = 0xD2511F53, 0xCD9E8D57
    W0, W1 = 0x9E3779B9, 0xBB67AE85
    INPUT_SALT = 0x9E3779B9
    CHUNK = 1 << 22

    @staticmethod
    def fnv1a32(text):
        h = 0x811C9DC5
        for byte in text.encode():
            h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
        return h

    @classmethod
    def _mulhilo(cls, m, x):
        """(hi, lo) of the 64-bit product of the constant m and x (int64 tensor < 2^32)."""
        p_lo = (m & 0xFFFF) * x  # < 2^48
        p_hi = (m >> 16) * x  # < 2^48
        t = p_lo + ((p_hi & 0xFFFF) << 16)
        return (t >> 32) + (p_hi >> 16), t & cls.MASK

    @classmethod
    def block(cls, seed, step, stream, elements):
        """The four output words for int64 tensor `elements` (counter words 0 and 1)."""
        k0, k1 = seed & cls.MASK, (seed >> 32) & cls.MASK
        c0 = elements & cls.MASK
        c1 = elements >> 32
        c2 = torch.full_like(elements, stream & cls.MASK)
        c3 = torch.full_like(elements, step & cls.MASK)
        for r in range(10):
            if r:
                k0, k1 = (k0 + cls.W0) & cls.MASK, (k1 + cls.W1) & cls.MASK
            hi0, lo0 = cls._mulhilo(cls.M0, c0)
            hi1, lo1 = cls._mulhilo(cls.M1, c2)
            c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        return c0, c1, c2, c3

    @classmethod
    def normal(cls, seed, name, count, std):
        """std * standardNormal(seed, 0, fnv1a32(name), e) for e < count, in double."""
        stream = cls.fnv1a32(name)
        out = torch.empty(count, dtype=torch.float64)
        for start in range(0, count, cls.CHUNK):
            e = torch.arange(start, min(count, start + cls.CHUNK), dtype=torch.int64)
            w0, w1, _, _ = cls.block(seed, 0, stream, e)
            u1 = (w0.double() + 1.0) * 2.0 ** -32
            u2 = w1.double() * 2.0 ** -32
            out[start:start + len(e)] = std * (torch.sqrt(-2.0 * torch.log(u1))
                                               * torch.cos(2 * math.pi * u2))
        return out

    @staticmethod
    def mod64(hi, lo, bound):
        """((hi << 32) | lo) mod bound for int64 tensors of 32-bit words, bound < 2^31."""
        if isinstance(bound, int):
            return ((hi % bound) * ((1 << 32) % bound) % bound + lo % bound) % bound
        two32 = torch.remainder(torch.full_like(bound, 1 << 32), bound)
        return ((hi % bound) * two32 % bound + lo % bound) % bound

    @classmethod
    def random_inputs(cls, seed, names, count, bound):
        """ampc's randomizeInputs for integer inputs: one tensor of `count` ids per name."""
        e = torch.arange(count, dtype=torch.int64)
        out = []
        for name in names:
            w0, w1, _, _ = cls.block(seed, 0, cls.fnv1a32(name) ^ cls.INPUT_SALT, e)
            out.append(cls.mod64(w1, w0, bound))
        return out

