//! The usage text has a file of its own because it is prose, changed with the docs rather
//! than with the parser: a change to it is reviewed as wording, and the grammar's code
//! stays short enough to read in one sitting.

/// What `--help` prints (the same for `zr` and `zr-wasm`; `zr-wasm` adds its own options).
pub const USAGE: &str = "\
zr: inspect, verify, compact, convert and export zrecord stores and datasets

usage:
  zr inspect STORE [--json]     header, record count, codec mix, chunk use, sizes, schema
                                (inspect, stats, verify and export also take a dataset
                                of named fields: a directory with a dataset.json)
  zr verify STORE [--json] [--seal]
                                check every record's checksum and decode every record;
                                exit 1 if any fails; --seal first checksums the records
                                that have none (added or moved by another writer)
  zr stats STORE                storage usage as JSON
  zr delete STORE INDEX...      delete records (the tail moves into each hole)
  zr delete DATASET INDEX... [--from-file F]
                                delete samples of a dataset of named fields (every field;
                                the samples after them move up; indices also one a line
                                or space-separated in F); a store that is a field of a
                                dataset is refused unless --force (it would break the
                                dataset)
  zr compact STORE              reclaim the space of deleted records, in place
  zr compact DATASET [--target-rows N]
                                merge neighbouring small shards into shards of at most N
                                samples (default 1048576); values, order and the identity
                                a saved loader state names stay
  zr clean DATASET|URL [--older-than SECONDS]
                                remove the folders an interrupted write left (the ones
                                dataset.json does not name; verify and inspect list them);
                                by URL the unlisted objects written at least SECONDS ago
                                (default a day: a younger one may be a write in flight)
  zr copy DATASET|URL OUT|URL   copy a dataset as one consistent state, even while others
                                append, delete or compact it (cp -r and rsync are safe
                                only on a dataset no one changes); files written dense
  zr layout STORE dense|sparse  size a store's (or every store of a dataset's) files:
                                dense, as long as what they hold (safe for cp, rsync,
                                tar, any copy; datasets are written so), or sparse, the
                                fixed sizes loaderx 0.5.4 needs; atomic per store
  zr convert IN.npy OUT [--codec flate|raw|zstd] [--chunk-mib N] [--min-savings F]
                                append each axis-0 slice of IN.npy to the dataset OUT
                                (created if missing; default codec flate, 64 MiB per step;
                                zstd: native zr only, unreadable by loaderx 0.5.4;
                                a record compression shrinks by less than the fraction F,
                                default 0.125, is stored raw)
  zr convert DIR|IN.npz OUT [--shard-records N] [--codec ...] [--chunk-mib N] [--min-savings F]
                                add the samples of a directory of .npy files (or an .npz),
                                one per field, to the dataset of named fields OUT; a ragged
                                field NAME is NAME.npy (values) with NAME_offsets.npy
                                (n + 1 element offsets from 0); a new shard every N samples
  zr convert TOKENS.bin OUT --tokens uint16|uint32|int32|... --eos ID [--shard-records N] ...
                                split a flat file of token ids (nanoGPT's train.bin) into
                                documents at each end-of-document id ID (not kept: give
                                it back with Pack(eos=ID)) and add them to the dataset OUT
                                as the ragged field tokens
                                (--skip-empty: leave out empty documents, two ids in a row,
                                and count them; without it they fail the conversion)
  zr convert TEXT OUT --tokenizer tokenizer.json [--text-field text] [--eos ID] [--tokens-only] ...
                                tokenize a JSON Lines file (its text under --text-field), a
                                .txt file (one document) or a directory of them with a
                                Hugging Face tokenizer.json, on all cores, into the dataset
                                OUT's ragged field tokens (uint16, or uint32 past 65536 ids),
                                one sample per document, ID after each; the JSON objects'
                                other strings, numbers and booleans become fields beside it
                                (--tokens-only: none)
  zr convert DATA.bin OUT --megatron [--shard-records N] ...
                                a Megatron-LM indexed dataset (DATA.bin with DATA.idx) into
                                the dataset OUT's ragged field tokens, one sample per
                                sequence, its tokens as stored
  zr convert DIR OUT --images [--shard-records N]
                                an ImageFolder tree (DIR/CLASS/*.jpg|png|webp) into the
                                dataset OUT: an image field image (the files as they are,
                                headers checked) and label (int64, the class's place in the
                                sorted names, which go into the dataset card as classes);
                                WebDataset tar shards (a .tar or a directory of them):
                                .jpg/.png/.webp -> image, .cls -> label, .txt -> text
  zr push LOCAL URL             upload a dataset or store to an object store (s3://bucket/prefix,
                                gs://, az://; credentials and endpoint from AWS_*, GOOGLE_*,
                                AZURE_* variables): only its bytes, resumable, listing last
  zr pull URL OUT               a pushed dataset or store into the new directory OUT, as it
                                was (sparse files sparse: loaderx 0.5.4 reads it)
                                (inspect, stats, verify and export also read a pushed URL)
  zr view DATASET|URL [--port N] [--site DIR] [--tokenizer FILE] [--index N]
                                serve the dataset viewer on 127.0.0.1 (a free port unless
                                --port; the URL is printed; Ctrl-C stops it): a page that
                                reads the dataset in the browser with zr.wasm, a range at a
                                time (a URL: a dataset folder that allows ranged reads)
  zr export STORE OUT.npy [--verify auto|always|never]
                                write a dataset back to a .npy file, checking checksums
                                as --verify says (default auto: where there is one)
  zr export DATASET OUT|OUT.npz [--verify ...]
                                write each field of a dataset of named fields as NAME.npy
                                (and NAME_offsets.npy) into the new directory OUT, or an .npz
  zr --help | --version

native zr only:
  --follow-symlinks             open store files that are symbolic links leading out of
                                the store (refused by default)

exit status: 0 done, 1 verify found bad records, 2 error or bad arguments";
