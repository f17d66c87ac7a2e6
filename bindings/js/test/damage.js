// Damaging a store file in place for the tests that check a bad record is caught and
// named: positional I/O only, since store files may be sparse and large (meta.zr 256 MiB,
// a chunk 4 GiB).

import { closeSync, openSync, readSync, statSync, writeSync } from 'node:fs';

/** XORs the byte at `offset` of `path` (its last byte when `offset` is omitted) with `mask`. */
export function flipByte(path, offset = statSync(path).size - 1, mask = 0xff) {
  const fd = openSync(path, 'r+');
  try {
    const b = Buffer.alloc(1);
    readSync(fd, b, 0, 1, offset);
    b[0] ^= mask;
    writeSync(fd, b, 0, 1, offset);
  } finally {
    closeSync(fd);
  }
}
