"""Builds mqstore's compiled core (mqstore/kernels/*.pyx) with Cython at install time;
everything else about the package is in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

KERNELS = [
    Extension(
        "mqstore.kernels._scan",
        ["mqstore/kernels/_scan.pyx"],
        include_dirs=["mqstore/kernels"],  # crc32_fold.h, big_endian.h, topic_hash.h
        depends=["mqstore/kernels/crc32_fold.h", "mqstore/kernels/big_endian.h", "mqstore/kernels/topic_hash.h"],
        extra_compile_args=["-O3"],
        libraries=["z"],  # zlib's crc32 (bit-identical to the CRC RocketMQ stores) past the folding
    ),
    Extension("mqstore.kernels._dispatch", ["mqstore/kernels/_dispatch.pyx"], extra_compile_args=["-O3"]),
    Extension("mqstore.kernels._verify", ["mqstore/kernels/_verify.pyx"], extra_compile_args=["-O3"]),
    Extension("mqstore.kernels._queues", ["mqstore/kernels/_queues.pyx"], extra_compile_args=["-O3"]),
    Extension("mqstore.kernels._topics", ["mqstore/kernels/_topics.pyx"], extra_compile_args=["-O3"]),
    Extension(
        "mqstore.kernels._intern",
        ["mqstore/kernels/_intern.pyx"],
        include_dirs=["mqstore/kernels"],  # topic_hash.h
        depends=["mqstore/kernels/topic_hash.h"],
        extra_compile_args=["-O3"],
    ),
    Extension("mqstore.kernels._files", ["mqstore/kernels/_files.pyx"], extra_compile_args=["-O3"]),
    Extension("mqstore.kernels._probe", ["mqstore/kernels/_probe.pyx"], extra_compile_args=["-O3"]),
    Extension(
        "mqstore.kernels._encode",
        ["mqstore/kernels/_encode.pyx"],
        include_dirs=["mqstore/kernels"],  # crc32_fold.h, utf8.h
        depends=["mqstore/kernels/crc32_fold.h", "mqstore/kernels/utf8.h"],
        extra_compile_args=["-O3"],
        libraries=["z"],
    ),
    Extension(
        "mqstore.kernels._decode",
        ["mqstore/kernels/_decode.pyx"],
        include_dirs=["mqstore/kernels"],  # crc32_fold.h, big_endian.h, utf8.h
        depends=["mqstore/kernels/crc32_fold.h", "mqstore/kernels/big_endian.h", "mqstore/kernels/utf8.h"],
        extra_compile_args=["-O3"],
        libraries=["z"],
    ),
]

setup(ext_modules=cythonize(KERNELS, build_dir="build/cython", compiler_directives={"language_level": 3}))
