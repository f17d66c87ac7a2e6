//! Datasets from and to NumPy files: `zr convert DIR|IN.npz OUT` and `zr export DATASET
//! OUT|OUT.npz`.
//!
//! The files are the arrays a loader batch holds, one field at a time:
//! - a fixed field `NAME` is `NAME.npy`, samples along axis 0;
//! - a ragged field `NAME` is `NAME.npy`, every sample's elements back to back (1-D), and
//!   `NAME_offsets.npy`, `n + 1` integer element offsets starting at 0 (Arrow's list
//!   layout): sample `k` is `values[offsets[k]..offsets[k + 1]]`;
//! - a bytes or string field is exported as a ragged `uint8` field of its values (UTF-8
//!   for strings); imported again, it is a ragged field.
//!
//! `NAME_offsets.npy` is read as offsets only when `NAME.npy` is there too; otherwise it is a
//! field of its own. An input is a directory of such files or an `.npz` holding them (what
//! `numpy.savez` and `numpy.savez_compressed` write); an export writes either.
//!
//! Both directions stream: a block of rows of every field at a time (`chunk_bytes` of
//! fixed samples, and no more than `chunk_bytes` of ragged values), so memory stays
//! bounded whatever the size of the dataset.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use zrecord_app::npy;
use zrecord_app::tools::NpySource;
use zrecord_core::dataset::Field;
use zrecord_core::error::{Error, FormatError, IoError};
use zrecord_core::Codec;

use super::{Dataset, DatasetError, DatasetWriter, WriteOptions};

/// The suffix of a ragged field's offsets file (`tokens_offsets.npy`), and of its batch key.
pub const OFFSETS_SUFFIX: &str = "_offsets";

/// How [`import_npy`] writes.
#[derive(Clone, Copy, Debug)]
pub struct ImportOptions {
    /// The codec of every field of a new dataset (an existing one keeps its own).
    pub codec: Codec,
    /// Shard size and compression threshold.
    pub write: WriteOptions,
    /// About how many bytes of input one block reads.
    pub chunk_bytes: usize,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions { codec: Codec::Flate, write: WriteOptions::default(), chunk_bytes: 64 << 20 }
    }
}

/// What [`import_npy`] did.
#[derive(Debug)]
pub struct Imported {
    /// Samples added.
    pub samples: u64,
    /// The dataset after the commit.
    pub dataset: Dataset,
}

/// What an export writes: a directory of `.npy` files, or one `.npz`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportTo {
    /// `NAME.npy` (and `NAME_offsets.npy`) files in an existing empty directory.
    Dir,
    /// An uncompressed `.npz` (zip64) at the path, created or replaced.
    Npz,
}

fn io<'a>(path: &'a Path, what: &str) -> impl Fn(std::io::Error) -> Error + 'a {
    let what = what.to_owned();
    move |e| Error::Io(IoError::from_std(e, format!("{what} {}", path.display())))
}

/// One `.npy` of the input, which can be opened as often as needed.
struct Member {
    /// The file's stem: a field name, or `NAME_offsets`.
    stem: String,
    /// How errors name it: the file, or `archive.npz/member.npy`.
    shown: PathBuf,
    /// Bytes of the whole `.npy` (uncompressed).
    size: u64,
    source: Source,
}

enum Source {
    File(PathBuf),
    Zip { archive: PathBuf, start: u64, compressed: u64, crc: u32, deflated: bool },
}

impl Member {
    /// The `.npy` from its first byte.
    fn open(&self) -> Result<Box<dyn Read>, Error> {
        match &self.source {
            Source::File(p) => Ok(Box::new(BufReader::with_capacity(1 << 20, File::open(p).map_err(io(p, "open"))?))),
            Source::Zip { archive, start, compressed, crc, deflated } => {
                let mut f = File::open(archive).map_err(io(archive, "open"))?;
                f.seek(SeekFrom::Start(*start)).map_err(io(archive, "seek"))?;
                let raw = BufReader::with_capacity(1 << 20, f).take(*compressed);
                let inner: Box<dyn Read> =
                    if *deflated { Box::new(flate2::read::DeflateDecoder::new(raw)) } else { Box::new(raw) };
                Ok(Box::new(Checked { inner, hasher: crc32fast::Hasher::new(), left: self.size, crc: *crc }))
            }
        }
    }
}

/// A zip member's bytes, checked against the size and CRC-32 its directory entry records.
struct Checked {
    inner: Box<dyn Read>,
    hasher: crc32fast::Hasher,
    left: u64,
    crc: u32,
}

impl Read for Checked {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.left = self.left.checked_sub(n as u64).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "member is longer than its directory entry says")
        })?;
        if self.left == 0 && self.hasher.clone().finalize() != self.crc {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "CRC-32 mismatch: the archive is damaged",
            ));
        }
        Ok(n)
    }
}

/// The `.npy` members of `input`: every `*.npy` in a directory (by name), or every member
/// of an `.npz` (in archive order).
fn members(input: &Path) -> Result<Vec<Member>, DatasetError> {
    let at = |e: Error| DatasetError::at(input, None, e);
    let meta = std::fs::metadata(input).map_err(|e| at(io(input, "read")(e)))?;
    let mut out = Vec::new();
    if meta.is_dir() {
        for entry in std::fs::read_dir(input).map_err(|e| at(io(input, "list")(e)))? {
            let entry = entry.map_err(|e| at(io(input, "list")(e)))?;
            let path = entry.path();
            let Some(stem) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".npy")) else {
                continue;
            };
            let size = entry.metadata().map_err(|e| at(io(&path, "read")(e)))?.len();
            out.push(Member { stem: stem.to_owned(), shown: path.clone(), size, source: Source::File(path) });
        }
        out.sort_by(|a, b| a.stem.cmp(&b.stem));
    } else {
        let file = File::open(input).map_err(|e| at(io(input, "open")(e)))?;
        let mut zip = zip::ZipArchive::new(BufReader::new(file))
            .map_err(|e| at(FormatError::Container(format!("not an .npz (zip) archive: {e}")).into()))?;
        for i in 0..zip.len() {
            let m = zip.by_index_raw(i).map_err(|e| at(FormatError::Container(format!("member {i}: {e}")).into()))?;
            let name = m.name().map(|n| n.into_owned()).unwrap_or_else(|_| format!("member {i}"));
            let shown = input.join(&name);
            let bad = |what: String| DatasetError::at(&shown, None, FormatError::Container(what));
            let Some(stem) = name.strip_suffix(".npy") else {
                return Err(bad("an .npz member must be a .npy file".into()));
            };
            if m.encrypted() {
                return Err(bad("is encrypted".into()));
            }
            let deflated = match m.compression() {
                zip::CompressionMethod::Stored => false,
                zip::CompressionMethod::Deflated => true,
                other => return Err(bad(format!("is compressed with {other}; only stored and deflated are read"))),
            };
            let start = m.data_start().ok_or_else(|| bad("has no data offset".into()))?;
            let source = Source::Zip {
                archive: input.to_path_buf(),
                start,
                compressed: m.compressed_size(),
                crc: m.crc32(),
                deflated,
            };
            out.push(Member { stem: stem.to_owned(), shown: shown.clone(), size: m.size(), source });
        }
    }
    if out.is_empty() {
        return Err(at(Error::InvalidArgument("holds no .npy file".into())));
    }
    Ok(out)
}

/// An opened member: its header, and the stream positioned at its data.
struct Stream {
    shown: PathBuf,
    header: npy::NpyHeader,
    reader: Box<dyn Read>,
}

impl Stream {
    fn open(m: &Member) -> Result<Stream, DatasetError> {
        let at = |e: Error| DatasetError::at(&m.shown, None, e);
        let mut reader = m.open().map_err(at)?;
        let mut bytes = vec![0u8; npy::PREFIX_LEN];
        reader.read_exact(&mut bytes).map_err(|e| at(read_error(&m.shown, e)))?;
        let total = npy::header_len(&bytes).map_err(|e| at(e.into()))?;
        if total > m.size || total > 1 << 24 {
            return Err(at(FormatError::Container(".npy header is truncated".into()).into()));
        }
        bytes.resize(total as usize, 0);
        reader.read_exact(&mut bytes[npy::PREFIX_LEN..]).map_err(|e| at(read_error(&m.shown, e)))?;
        let header = npy::parse_header(&bytes).map_err(|e| at(e.into()))?;
        Ok(Stream { shown: m.shown.clone(), header, reader })
    }

    /// Fails unless the member holds `data` bytes after its header.
    fn expect_data(&self, m: &Member, data: u64) -> Result<(), DatasetError> {
        if m.size < self.header.data_offset.saturating_add(data) {
            return Err(DatasetError::at(
                &self.shown,
                None,
                FormatError::Container(format!(
                    ".npy data is truncated: {data} bytes expected, {} there",
                    m.size.saturating_sub(self.header.data_offset)
                )),
            ));
        }
        Ok(())
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<(), DatasetError> {
        self.reader.read_exact(buf).map_err(|e| DatasetError::at(&self.shown, None, read_error(&self.shown, e)))
    }
}

fn read_error(path: &Path, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::InvalidData {
        return FormatError::Container(e.to_string()).into();
    }
    io(path, "read")(e)
}

/// A ragged field's offsets, read ahead of the values a block takes.
struct Offsets {
    stream: Stream,
    /// Bytes per offset (4 or 8) and whether they are signed.
    width: usize,
    signed: bool,
    /// Offsets read and not yet passed: `pending[0]` is where the next sample starts.
    pending: Vec<u64>,
    /// Offsets read so far (the index of the next one in the file).
    read: u64,
    /// Offsets in the file (`n + 1`).
    count: u64,
    /// Elements in the values file.
    values: u64,
}

impl Offsets {
    /// Makes sure `pending` holds `want` offsets (or all that are left), checking each.
    fn fill(&mut self, want: usize) -> Result<(), DatasetError> {
        let missing = (want.saturating_sub(self.pending.len()) as u64).min(self.count - self.read) as usize;
        if missing == 0 {
            return Ok(());
        }
        let mut raw = vec![0u8; missing * self.width];
        self.stream.read(&mut raw)?;
        for chunk in raw.chunks_exact(self.width) {
            let (value, negative) = match (self.width, self.signed) {
                (8, true) => {
                    let v = i64::from_le_bytes(chunk.try_into().expect("8 bytes"));
                    (v as u64, v < 0)
                }
                (8, false) => (u64::from_le_bytes(chunk.try_into().expect("8 bytes")), false),
                (_, true) => {
                    let v = i32::from_le_bytes(chunk.try_into().expect("4 bytes"));
                    (v as u64, v < 0)
                }
                (_, false) => (u64::from(u32::from_le_bytes(chunk.try_into().expect("4 bytes"))), false),
            };
            let k = self.read;
            let bad = |what: String| DatasetError::at(&self.stream.shown, None, FormatError::Container(what));
            let before = self.pending.last().copied();
            if negative {
                return Err(bad(format!("offset {k} is negative")));
            }
            if k == 0 && value != 0 {
                return Err(bad(format!("offsets must start at 0, not {value}")));
            }
            if before.is_some_and(|b| value < b) {
                return Err(bad(format!("offset {k} ({value}) is less than offset {} before it", k - 1)));
            }
            if value > self.values {
                return Err(bad(format!("offset {k} ({value}) is past the {} values", self.values)));
            }
            self.pending.push(value);
            self.read += 1;
        }
        Ok(())
    }
}

/// One field of the input being read.
enum Reader {
    Fixed { data: Stream, sample_len: u64 },
    Ragged { values: Stream, offsets: Offsets, itemsize: u64 },
}

/// Adds the samples in `input` (a directory of `.npy` files or an `.npz`, see the module
/// docs) to the dataset in `output`, creating it when there is none. Every input file is
/// checked (headers, shapes, equal sample counts) before anything is written, and the
/// samples are published at once at the end: an error leaves `output` as it was.
/// `progress(done, total)` is called after each block with samples staged so far.
pub fn import_npy(
    input: &Path,
    output: &Path,
    options: &ImportOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Imported, DatasetError> {
    let members = members(input)?;
    let mut fields = Vec::new();
    let mut readers = Vec::new();
    let mut rows: Option<(u64, PathBuf)> = None;
    for m in &members {
        let offsets_of = |stem: &str| members.iter().find(|o| o.stem == format!("{stem}{OFFSETS_SUFFIX}"));
        if let Some(base) = m.stem.strip_suffix(OFFSETS_SUFFIX) {
            if members.iter().any(|b| b.stem == base) {
                continue; // read with `base`
            }
        }
        let stream = Stream::open(m)?;
        let bad = |e: Error| DatasetError::at(&m.shown, Some(&m.stem), e);
        let (field, reader, n) = match offsets_of(&m.stem) {
            None => {
                let src = NpySource::from_header(stream.header.clone()).map_err(bad)?;
                if src.transposed() {
                    return Err(bad(Error::InvalidArgument(
                        "a Fortran-ordered field is not supported here (it is read front to back): save it with \
                         np.ascontiguousarray, or convert it alone with `zr convert FILE.npy`"
                            .into(),
                    )));
                }
                stream.expect_data(m, src.data_len())?;
                let field = Field::fixed(&m.stem, &src.header.descr, src.sample_shape(), options.codec);
                (field, Reader::Fixed { data: stream, sample_len: src.sample_len }, src.rows)
            }
            Some(om) => {
                let descr = stream.header.descr.clone();
                let &[count] = stream.header.shape.as_slice() else {
                    return Err(bad(Error::InvalidArgument(format!(
                        "the values of a ragged field must be 1-D, not of shape {:?} (it has {} beside it)",
                        stream.header.shape,
                        om.shown.display()
                    ))));
                };
                let itemsize = zrecord_core::dtype::itemsize(&descr).map_err(|e| bad(e.into()))?;
                stream.expect_data(m, count.saturating_mul(itemsize))?;
                let ostream = Stream::open(om)?;
                let obad = |what: String| DatasetError::at(&om.shown, Some(&m.stem), Error::InvalidArgument(what));
                let (width, signed) = match ostream.header.descr.as_str() {
                    "<i8" => (8, true),
                    "<u8" => (8, false),
                    "<i4" => (4, true),
                    "<u4" => (4, false),
                    d => return Err(obad(format!("offsets must be little-endian int32/int64, not {d:?}"))),
                };
                let &[ocount] = ostream.header.shape.as_slice() else {
                    return Err(obad(format!("offsets must be 1-D, not of shape {:?}", ostream.header.shape)));
                };
                if ocount == 0 {
                    return Err(obad("offsets need n + 1 entries (a leading 0), got none".into()));
                }
                ostream.expect_data(om, ocount * width as u64)?;
                let offsets = Offsets {
                    stream: ostream,
                    width,
                    signed,
                    pending: Vec::new(),
                    read: 0,
                    count: ocount,
                    values: count,
                };
                let field = Field::ragged(&m.stem, &descr, options.codec);
                (field, Reader::Ragged { values: stream, offsets, itemsize }, ocount - 1)
            }
        };
        match &rows {
            None => rows = Some((n, m.shown.clone())),
            Some((r, first)) if *r != n => {
                return Err(bad(Error::InvalidArgument(format!(
                    "{n} samples, but {} holds {r}: every field needs one entry per sample",
                    first.display()
                ))));
            }
            Some(_) => {}
        }
        fields.push(field);
        readers.push(reader);
    }
    let rows = rows.map_or(0, |(r, _)| r);

    let mut writer = DatasetWriter::open(output, fields, options.write)?;
    let fixed_row: u64 =
        readers.iter().map(|r| if let Reader::Fixed { sample_len, .. } = r { *sample_len } else { 0 }).sum();
    let chunk = options.chunk_bytes.max(1) as u64;
    let mut bufs: Vec<Vec<u8>> = readers.iter().map(|_| Vec::new()).collect();
    let mut rel: Vec<Vec<u64>> = readers.iter().map(|_| Vec::new()).collect();
    let mut done = 0u64;
    progress(0, rows);
    while done < rows {
        let mut step = (chunk / fixed_row.max(1)).clamp(1, rows - done);
        // A ragged field may shorten the block to keep its values within `chunk` bytes.
        for r in &mut readers {
            if let Reader::Ragged { offsets, itemsize, .. } = r {
                offsets.fill(step as usize + 1)?;
                let p = &offsets.pending;
                let fits = p[1..=step as usize].iter().take_while(|&&o| (o - p[0]) * *itemsize <= chunk).count();
                step = step.min(fits.max(1) as u64);
            }
        }
        for (k, r) in readers.iter_mut().enumerate() {
            match r {
                Reader::Fixed { data, sample_len } => {
                    bufs[k].resize((step * *sample_len) as usize, 0);
                    data.read(&mut bufs[k])?;
                }
                Reader::Ragged { values, offsets, itemsize } => {
                    let p = &offsets.pending;
                    let first = p[0];
                    rel[k].clear();
                    rel[k].extend(p[..=step as usize].iter().map(|&o| (o - first) * *itemsize));
                    bufs[k].resize(rel[k][step as usize] as usize, 0);
                    values.read(&mut bufs[k])?;
                    offsets.pending.drain(..step as usize);
                }
            }
        }
        let columns: Vec<super::Column<'_>> = readers
            .iter()
            .enumerate()
            .map(|(k, r)| match r {
                Reader::Fixed { .. } => super::Column::Fixed(&bufs[k]),
                Reader::Ragged { .. } => super::Column::Ragged { values: &bufs[k], offsets: &rel[k] },
            })
            .collect();
        writer.write(&columns)?;
        done += step;
        progress(done, rows);
    }
    for r in &readers {
        if let Reader::Ragged { values, offsets, .. } = r {
            let last = offsets.pending.first().copied().unwrap_or(0);
            if last != offsets.values {
                return Err(DatasetError::at(
                    &offsets.stream.shown,
                    None,
                    FormatError::Container(format!(
                        "the last offset is {last}, but {} holds {} values",
                        values.shown.display(),
                        offsets.values
                    )),
                ));
            }
        }
    }
    let dataset = writer.commit()?;
    Ok(Imported { samples: rows, dataset })
}

/// Where an export writes: one file after another.
enum Sink {
    Dir { dir: PathBuf, file: Option<(BufWriter<File>, PathBuf)> },
    Npz { path: PathBuf, zip: Option<Box<zip::ZipWriter<BufWriter<File>>>> },
}

impl Sink {
    fn path(&self) -> &Path {
        match self {
            Sink::Dir { dir, file } => file.as_ref().map_or(dir, |(_, p)| p),
            Sink::Npz { path, .. } => path,
        }
    }

    fn close_file(&mut self) -> Result<(), Error> {
        if let Sink::Dir { file, .. } = self {
            if let Some((w, p)) = file.take() {
                let f = w.into_inner().map_err(|e| io(&p, "write")(e.into_error()))?;
                f.sync_all().map_err(io(&p, "sync"))?;
            }
        }
        Ok(())
    }

    /// Starts member `name` (`NAME.npy`).
    fn begin(&mut self, name: &str) -> Result<(), Error> {
        self.close_file()?;
        match self {
            Sink::Dir { dir, file } => {
                let p = dir.join(name);
                let f = File::create(&p).map_err(io(&p, "create"))?;
                *file = Some((BufWriter::with_capacity(1 << 20, f), p));
            }
            Sink::Npz { path, zip } => {
                let options = zip::write::SimpleFileOptions::default()
                    .compression_method(zip::CompressionMethod::Stored)
                    .large_file(true);
                let z = zip.as_mut().expect("open until finish");
                z.start_file(name, options).map_err(|e| io(path, "write")(e.into()))?;
            }
        }
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), Error> {
        match self {
            Sink::Dir { file, .. } => {
                let (w, p) = file.as_mut().expect("begin comes first");
                w.write_all(bytes).map_err(io(p, "write"))
            }
            Sink::Npz { path, zip } => {
                zip.as_mut().expect("open until finish").write_all(bytes).map_err(io(path, "write"))
            }
        }
    }

    fn finish(mut self) -> Result<(), Error> {
        self.close_file()?;
        if let Sink::Npz { path, zip } = &mut self {
            let z = zip.take().expect("open until finish");
            let w = z.finish().map_err(|e| io(path, "write")(e.into()))?;
            let f = w.into_inner().map_err(|e| io(path, "write")(e.into_error()))?;
            f.sync_all().map_err(io(path, "sync"))?;
        }
        Ok(())
    }
}

/// Writes every field of `ds` as NumPy files (see the module docs) into `out`: an existing
/// empty directory for [`ExportTo::Dir`], a file created or replaced for [`ExportTo::Npz`].
/// Reads `chunk_bytes` of samples at a time; `progress(done, total)` counts samples over
/// all fields. Returns the number of samples. On an error, what was written is left for
/// the caller to remove.
pub fn export_npy(
    ds: &Dataset,
    out: &Path,
    to: ExportTo,
    chunk_bytes: usize,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<u64, DatasetError> {
    let mut sink = match to {
        ExportTo::Dir => Sink::Dir { dir: out.to_path_buf(), file: None },
        ExportTo::Npz => {
            let f = File::create(out).map_err(|e| DatasetError::at(out, None, io(out, "create")(e)))?;
            Sink::Npz {
                path: out.to_path_buf(),
                zip: Some(Box::new(zip::ZipWriter::new(BufWriter::with_capacity(1 << 20, f)))),
            }
        }
    };
    let n = ds.len();
    let total = n * ds.fields().len() as u64;
    let chunk = chunk_bytes.max(1) as u64;
    let mut done = 0u64;
    progress(0, total);
    let mut buf = Vec::new();
    let mut idx: Vec<u64> = Vec::new();
    let mut lens: Vec<u64> = Vec::new();
    for (f, field) in ds.fields().iter().enumerate() {
        let name = &field.name;
        let out_err = |sink: &Sink, e: Error| DatasetError::at(sink.path(), Some(name), e);
        if !field.is_ragged() {
            let size = ds.sample_len(f) as u64;
            let mut shape = vec![n];
            shape.extend_from_slice(&field.shape);
            sink.begin(&format!("{name}.npy")).map_err(|e| out_err(&sink, e))?;
            sink.write(&npy::write_header(&field.dtype, &shape)).map_err(|e| out_err(&sink, e))?;
            let step = (chunk / size.max(1)).max(1);
            let mut at = 0u64;
            while at < n {
                let k = step.min(n - at);
                idx.clear();
                idx.extend(at..at + k);
                buf.resize((k * size) as usize, 0);
                ds.gather_fixed(f, &idx, &mut buf, None, true)?;
                sink.write(&buf).map_err(|e| out_err(&sink, e))?;
                at += k;
                done += k;
                progress(done, total);
            }
            continue;
        }
        // Ragged: the values file needs its element count up front (a pass over the
        // record lengths, which decodes nothing), then values, then offsets.
        const WINDOW: u64 = 1 << 16;
        let item = ds.itemsize(f) as u64;
        // A bytes or string field's records end in a stop byte, which the files leave out.
        let stop = u64::from(field.has_stop_byte());
        let mut value_bytes = 0u64;
        let mut at = 0u64;
        while at < n {
            let k = WINDOW.min(n - at);
            idx.clear();
            idx.extend(at..at + k);
            lens.resize(k as usize, 0);
            ds.byte_lengths(f, &idx, &mut lens)?;
            value_bytes += lens.iter().sum::<u64>() - k * stop;
            at += k;
        }
        sink.begin(&format!("{name}.npy")).map_err(|e| out_err(&sink, e))?;
        sink.write(&npy::write_header(&field.dtype, &[value_bytes / item])).map_err(|e| out_err(&sink, e))?;
        let mut at = 0u64;
        let mut starts: Vec<u64> = Vec::new();
        while at < n {
            let k = WINDOW.min(n - at);
            idx.clear();
            idx.extend(at..at + k);
            lens.resize(k as usize, 0);
            ds.byte_lengths(f, &idx, &mut lens)?;
            // Runs of the window whose values fit `chunk` bytes (one sample at least).
            let mut from = 0usize;
            while from < k as usize {
                let mut to = from;
                let mut bytes = 0u64;
                while to < k as usize && (to == from || bytes + lens[to] <= chunk) {
                    bytes += lens[to];
                    to += 1;
                }
                starts.clear();
                let mut s = 0u64;
                for &len in &lens[from..to] {
                    starts.push(s);
                    s += len;
                }
                if stop == 1 {
                    let (values, _) = ds.gather_ragged(f, &idx[from..to])?;
                    sink.write(&values).map_err(|e| out_err(&sink, e))?;
                } else {
                    buf.resize(bytes as usize, 0);
                    ds.gather_at(f, &idx[from..to], &mut buf, &starts)?;
                    sink.write(&buf).map_err(|e| out_err(&sink, e))?;
                }
                done += (to - from) as u64;
                progress(done, total);
                from = to;
            }
            at += k;
        }
        sink.begin(&format!("{name}{OFFSETS_SUFFIX}.npy")).map_err(|e| out_err(&sink, e))?;
        sink.write(&npy::write_header("<i8", &[n + 1])).map_err(|e| out_err(&sink, e))?;
        sink.write(&0i64.to_le_bytes()).map_err(|e| out_err(&sink, e))?;
        let mut end = 0u64;
        let mut at = 0u64;
        while at < n {
            let k = WINDOW.min(n - at);
            idx.clear();
            idx.extend(at..at + k);
            lens.resize(k as usize, 0);
            ds.byte_lengths(f, &idx, &mut lens)?;
            buf.clear();
            for &len in &lens {
                end += (len - stop) / item;
                buf.extend_from_slice(&(end as i64).to_le_bytes());
            }
            sink.write(&buf).map_err(|e| out_err(&sink, e))?;
            at += k;
        }
    }
    let path = sink.path().to_path_buf();
    sink.finish().map_err(|e| DatasetError::at(&path, None, e))?;
    progress(total, total);
    Ok(n)
}
