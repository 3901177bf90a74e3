"""asv: core helpers shared by every format."""

import numpy as np

from tenfold._kernels import load
from tenfold.core.checksums import crc32c, sha256, xxh3_64


class ChecksumSuite:
    def setup(self):
        self.data = np.random.default_rng(0).integers(0, 255, 16 << 20, np.uint8)

    def time_crc32c(self):
        crc32c(self.data)

    def time_sha256(self):
        sha256(self.data)

    def time_xxh3(self):
        xxh3_64(self.data)


class Xxh3Suite:
    """XXH3-64 of 16 MiB: tenfold's kernel (one-shot, streamed in 1 MiB pieces, copied while
    hashed) against the xxhash package on the same buffer."""

    params = [["kernel", "xxhash"]]
    param_names = ["impl"]

    def setup(self, impl):
        import xxhash

        self.data = np.random.default_rng(0).integers(0, 255, 16 << 20, np.uint8)
        self.dst = np.empty_like(self.data)
        if impl == "kernel":
            k = load("xxh3", "compiled")
            self.one = k.xxh3_64
            self.state = k.Xxh3State
            self.copy = k.copy_xxh3
        else:
            self.one = xxhash.xxh3_64_intdigest
            self.state = xxhash.xxh3_64

            def copy(src, dst, h):
                np.copyto(dst, src)
                h.update(dst)

            self.copy = copy

    def time_oneshot(self, impl):
        self.one(self.data)

    def time_streamed_1mib(self, impl):
        h = self.state()
        for i in range(0, self.data.size, 1 << 20):
            h.update(self.data[i : i + (1 << 20)])
        h.intdigest()

    def time_copy_and_hash(self, impl):
        h = self.state()
        self.copy(self.data, self.dst, h)
        h.intdigest()


class ScanSuite:
    params = [["compiled", "reference"]]
    param_names = ["impl"]

    def setup(self, impl):
        self.k = load("scan", impl)
        self.zeros = np.zeros(16 << 20, np.uint8)

    def time_first_nonzero(self, impl):
        self.k.first_nonzero(self.zeros)

    def time_xor_u64(self, impl):
        self.k.xor_u64_le(self.zeros)
