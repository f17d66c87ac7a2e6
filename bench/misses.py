"""Why a target of the benchmarks is missed, where the reason is known: bench/report.py
lists every "not met" row of a run's targets table under the first cause here that matches
it, and the rest under "no cause recorded". The figures come from the run; the text here
says why, so it carries no numbers that a new run would make stale.

Each cause: a title, a pattern matched against the row's "what" (and optionally one against
its note), and the explanation. Standard library only: `make bench-doc` runs it without the
bench venv.
"""

import re

CAUSES = [
    (
        "Against loaderx, DEFLATE on both sides",
        r"same codec \(min_savings=0\)",
        None,
        "With DEFLATE on every record on both sides, zrecord's lead is libdeflate against "
        "loaderx's inflater, and decoding on every core against one; that stays under 3x on "
        "this machine. The default-policy rows clear 3x where the policy stores records raw, "
        "which is what the policy is for, not a faster decoder "
        "([decisions/min-savings.md](decisions/min-savings.md)).",
    ),
    (
        "Data DEFLATE cannot shrink",
        r"flate vs loaderx",
        r"both store it raw",
        "DEFLATE does not save enough on this data, so zrecord and loaderx both store it raw, "
        "and both reads are copies bound by memory bandwidth.",
    ),
    (
        "Token windows, decode-bound",
        r"^\[tokens\] (gather|loader) flate vs loaderx",
        None,
        "The token windows compress by about half, so the policy keeps them compressed, and "
        "inflating 4 KiB records is most of a batch's time "
        "([decisions/zstd.md](decisions/zstd.md)). The opt-in zstd codec reads "
        "them faster (its rows in the tables above).",
    ),
    (
        "Large raw records",
        r"^\[images224\] loader raw vs loaderx",
        None,
        "Both loaders copy 150 KB records, bound by memory bandwidth; not investigated "
        "further.",
    ),
    (
        "Photo crops against torch",
        r"loader flate vs torch DataLoader",
        None,
        "The policy keeps photo crops compressed, so zrecord inflates every record while "
        "torch's four processes copy uncompressed rows from the page cache; not investigated "
        "further.",
    ),
    (
        "Cold reads against ArrayRecord",
        r"cold cache\] gather flate vs array_record",
        None,
        "ArrayRecord reads a batch of cold records faster than zrecord's per-record reads "
        "([decisions/cold-reads.md](decisions/cold-reads.md)).",
    ),
    (
        "SHUFFLE index generation",
        r"^stream: SHUFFLE vs IID",
        None,
        "SHUFFLE's keyed bijection, a six-round Feistel permutation, costs more per index "
        "than an IID draw ([stream.md](stream.md#the-keyed-bijection)).",
    ),
    (
        "Checksums on a raw store",
        r"^checksums \[[^]]*raw",
        None,
        "A raw write or gather is a copy at memory speed, so hashing every record is one more "
        "pass over the bytes, a larger share of the work than on a compressed store; runs of "
        "the same write path have spread wider than its budget "
        "([format.md](format.md#checksumszrc-per-record-checksums)).",
    ),
    (
        "The cache against a slow server",
        r"^remote: bytes fetched",
        None,
        "Against a local S3 server (long round trips, fast transfers) requests are merged "
        "across neighbouring records, and the bytes they bring along share the cache's "
        "budget; the in-memory store, with almost no merging, stays under the target "
        "([remote.md](remote.md)).",
    ),
    (
        "Opening costs round trips a short epoch cannot hide",
        r"^remote: the same, first epoch.*dataset 20,000 crops",
        None,
        "Timed from opening, a first epoch at 20 ms a request waits three round trips (60 ms) "
        "before its first batch: the listing and manifest, each store's meta.zr and "
        "checksums.zrc side by side, then the batch's records (four before 2026-12-03). "
        "0.8x of the 0 ms loader leaves a quarter of its epoch's time for all of that and every fetch after, and 312 batches at over "
        "1,200 batches/s last a quarter of a second or less: some 60 ms. Only a longer epoch "
        "can meet this row; the rows after the first epoch measure the loader itself "
        "([remote.md](remote.md#read-ahead)).",
    ),
    (
        "Far reads bound by requests in flight",
        r"^remote: loader at 20 ms.*dataset 20,000 crops",
        None,
        "With half the dataset cached and each epoch in a new order, the records fetched lie "
        "apart, so a request carries one or two records of 12 KiB, and the loader at 20 ms "
        "needs thousands of requests in flight to keep pace with the 0 ms loader on a fast "
        "run. A process keeps at most 2048 (MAX_READS_IN_FLIGHT): 1024 held this row under "
        "the target, and 4096 did no better on two cores, where the requests' own work "
        "competes with the loader's ([remote.md](remote.md#read-ahead)).",
    ),
    (
        "A cache too small for a round trip of read-ahead",
        r"^remote: (loader at 20 ms|the same, first epoch)",
        None,
        "Read-ahead must hold a round trip's worth of batches beside what the cache keeps "
        "for later epochs (20 ms at 1,300 batches/s of 768 KiB is 20 MiB); half of a small "
        "dataset cannot, so the loader slows to the pace its window allows. A first epoch "
        "also pays the opening round trips "
        "([remote.md](remote.md#read-ahead)).",
    ),
    (
        "A first epoch bound by the server's transfer",
        r"^remote: cold first epoch from the S3 server vs the local disk",
        None,
        "The whole dataset fits the default cache, so the first epoch is fetched in tiled "
        "requests of up to 16 MiB (about 60 for 236 MiB), nearly all of them sent for the "
        "first window of batches; the epoch is bound by how fast the local moto server "
        "sends them (it copies the whole object for every ranged GET), where the same "
        "loader's second epoch, from the cache, takes about a tenth of the time "
        "([remote.md](remote.md#read-ahead)).",
    ),
]


def cause_of(what, note=""):
    """(title, explanation) of the first cause matching a targets row, or None."""
    for title, pattern, note_pattern, text in CAUSES:
        if re.search(pattern, what) and (note_pattern is None or re.search(note_pattern, note or "")):
            return title, text
    return None
