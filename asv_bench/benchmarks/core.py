"""asv: core helpers shared by every format."""

import numpy as np

from tenfold._kernels import load
from tenfold.core.checksums import crc32c, sha256


class ChecksumSuite:
    def setup(self):
        self.data = np.random.default_rng(0).integers(0, 255, 16 << 20, np.uint8)

    def time_crc32c(self):
        crc32c(self.data)

    def time_sha256(self):
        sha256(self.data)


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
