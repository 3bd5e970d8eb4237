"""Times three Python S3 clients (obstore, s3fs, pyarrow.fs) against one S3 API on loopback,
to choose the client under flows/storage/ (results: benchmarks/results/object-store-libraries.md).

    moto_server -H 127.0.0.1 -p 5917 &
    python benchmarks/object_store_libraries.py --endpoint http://127.0.0.1:5917 --big FILE

Each operation runs `--repeat` times per library; the median wall time is printed as a
markdown table. The same big object (any ~400 MB file) and 1,000 small objects of 4 KB are
used by every library, each under its own prefix of one bucket.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

BLOCK = 32 * 1024 * 1024
SMALL_COUNT = 1000
SMALL_SIZE = 4096


def timed(action: Callable[[], object], repeat: int) -> float:
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def obstore_client(endpoint: str, bucket: str):
    import obstore
    from obstore.store import S3Store

    store = S3Store(bucket, endpoint=endpoint, region="us-east-1", client_options={"allow_http": True})

    def read_whole(key):
        return sum(len(chunk) for chunk in obstore.get(store, key).stream(min_chunk_size=BLOCK))

    def read_ranges(key, size):
        return sum(len(obstore.get_range(store, key, start=s, length=min(BLOCK, size - s))) for s in range(0, size, BLOCK))

    def create(key, data):
        try:
            obstore.put(store, key, data, mode="create")
            return True
        except obstore.exceptions.AlreadyExistsError:
            return False

    def list_prefix(prefix):
        return sum(len(batch) for batch in obstore.list(store, prefix))

    def delete_prefix(prefix):
        keys = [meta["path"] for batch in obstore.list(store, prefix) for meta in batch]
        obstore.delete(store, keys)

    return {
        "upload": lambda key, path: obstore.put(store, key, Path(path)),
        "put": lambda key, data: obstore.put(store, key, data),
        "read_whole": read_whole,
        "read_ranges": read_ranges,
        "get": lambda key: bytes(obstore.get(store, key).bytes()),
        "create": create,
        "list": list_prefix,
        "delete": delete_prefix,
    }


def s3fs_client(endpoint: str, bucket: str):
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=endpoint, default_block_size=BLOCK)

    def read_whole(key):
        with fs.open(f"{bucket}/{key}", "rb", block_size=BLOCK) as handle:
            return sum(len(block) for block in iter(lambda: handle.read(BLOCK), b""))

    def read_ranges(key, size):
        path = f"{bucket}/{key}"
        return sum(len(fs.cat_file(path, start=s, end=min(s + BLOCK, size))) for s in range(0, size, BLOCK))

    def create(key, data):
        try:
            fs.pipe_file(f"{bucket}/{key}", data, mode="create")
            return True
        except FileExistsError:
            return False

    def list_prefix(prefix):
        fs.invalidate_cache()
        return len(fs.find(f"{bucket}/{prefix}"))

    def delete_prefix(prefix):
        fs.invalidate_cache()
        fs.rm(fs.find(f"{bucket}/{prefix}"))

    return {
        "upload": lambda key, path: fs.put_file(path, f"{bucket}/{key}"),
        "put": lambda key, data: fs.pipe_file(f"{bucket}/{key}", data),
        "read_whole": read_whole,
        "read_ranges": read_ranges,
        "get": lambda key: fs.cat_file(f"{bucket}/{key}"),
        "create": create,
        "list": list_prefix,
        "delete": delete_prefix,
    }


def pyarrow_client(endpoint: str, bucket: str):
    from pyarrow import fs as pafs

    scheme, host = endpoint.split("://", 1)
    fs = pafs.S3FileSystem(endpoint_override=host, scheme=scheme, region="us-east-1")

    def read_whole(key):
        with fs.open_input_stream(f"{bucket}/{key}") as handle:
            return sum(len(block) for block in iter(lambda: handle.read(BLOCK), b""))

    def read_ranges(key, size):
        with fs.open_input_file(f"{bucket}/{key}") as handle:
            return sum(len(handle.read_at(min(BLOCK, size - s), s)) for s in range(0, size, BLOCK))

    def put(key, data):
        with fs.open_output_stream(f"{bucket}/{key}") as handle:
            handle.write(data)

    def upload(key, path):
        with open(path, "rb") as source, fs.open_output_stream(f"{bucket}/{key}") as handle:
            for block in iter(lambda: source.read(BLOCK), b""):
                handle.write(block)

    def get(key):
        with fs.open_input_stream(f"{bucket}/{key}") as handle:
            return handle.read()

    def list_prefix(prefix):
        return len(fs.get_file_info(pafs.FileSelector(f"{bucket}/{prefix}", recursive=True)))

    def delete_prefix(prefix):
        fs.delete_dir_contents(f"{bucket}/{prefix}")

    return {
        "upload": upload,
        "put": put,
        "read_whole": read_whole,
        "read_ranges": read_ranges,
        "get": get,
        "create": None,  # pyarrow.fs has no conditional write
        "list": list_prefix,
        "delete": delete_prefix,
    }


CLIENTS = {"obstore": obstore_client, "s3fs": s3fs_client, "pyarrow.fs": pyarrow_client}


def measure(name: str, client: dict, big: Path, repeat: int) -> dict[str, float | None]:
    size = big.stat().st_size
    prefix = f"bench-{name}"
    big_key = f"{prefix}/big.bin"
    small = os.urandom(SMALL_SIZE)
    row: dict[str, float | None] = {}
    row["upload big"] = timed(lambda: client["upload"](big_key, str(big)), repeat)
    row["read big whole"] = timed(lambda: client["read_whole"](big_key), repeat)
    row["read big, 32 MiB ranges"] = timed(lambda: client["read_ranges"](big_key, size), repeat)
    row["put 1,000 × 4 KB"] = timed(lambda: [client["put"](f"{prefix}/small/{i:04d}", small) for i in range(SMALL_COUNT)], 1)
    row["get 1,000 × 4 KB"] = timed(lambda: [client["get"](f"{prefix}/small/{i:04d}") for i in range(SMALL_COUNT)], 1)
    row["list 1,000-key prefix"] = timed(lambda: client["list"](f"{prefix}/small/"), repeat)
    if client["create"] is None:
        row["create-if-absent 1,000 (new, then again)"] = None
    else:
        def create_twice():
            fresh = [client["create"](f"{prefix}/log/{i:04d}", small) for i in range(SMALL_COUNT)]
            again = [client["create"](f"{prefix}/log/{i:04d}", small) for i in range(SMALL_COUNT)]
            assert all(fresh) and not any(again), "conditional create did not refuse an existing key"
        row["create-if-absent 1,000 (new, then again)"] = timed(create_twice, 1)
    row["delete prefix (~2,000 keys + big)"] = timed(lambda: client["delete"](f"{prefix}/"), 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--bucket", default="bench")
    parser.add_argument("--big", type=Path, required=True)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default=",".join(CLIENTS))
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    import boto3

    s3 = boto3.client("s3", endpoint_url=args.endpoint)
    if args.bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=args.bucket)
    rows = {name: measure(name, CLIENTS[name](args.endpoint, args.bucket), args.big, args.repeat) for name in args.only.split(",")}
    names = list(rows)
    print("| operation | " + " | ".join(names) + " |")
    print("| --- | " + " | ".join("---:" for _ in names) + " |")
    for operation in rows[names[0]]:
        cells = ["n/a" if rows[n][operation] is None else f"{rows[n][operation]:.2f} s" for n in names]
        print(f"| {operation} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
