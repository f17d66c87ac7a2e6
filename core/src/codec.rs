//! Record codecs: tag 0 stores bytes verbatim, tag 1 stores a raw DEFLATE stream (RFC 1951,
//! no zlib or gzip wrapper), which is what loaderx 0.5.4 writes.
//!
//! Compression happens once per record on append, with a reusable [`Deflater`] per worker
//! (a DEFLATE compressor carries a few hundred KiB of state; building one per record would
//! dominate small records). A record whose compressed form does not save at least the
//! [`CodecPolicy`]'s `min_savings` is stored raw, so reading never pays a full inflate for
//! a few percent of disk.
//!
//! Decompression writes straight into the caller's destination: the destination slice is the
//! whole output window, so there is no intermediate buffer and no copy.

use alloc::boxed::Box;
use alloc::vec::Vec;
use miniz_oxide::deflate::core::deflate_flags::TDEFL_FORCE_ALL_STATIC_BLOCKS;
use miniz_oxide::deflate::core::{
    compress, create_comp_flags_from_zip_params, CompressorOxide, TDEFLFlush, TDEFLStatus,
};
use miniz_oxide::inflate::core::{decompress, inflate_flags, DecompressorOxide};
use miniz_oxide::inflate::TINFLStatus;

use crate::error::{DecodeError, Error};

/// DEFLATE level used on append. Measured on image-like 12 KiB records (see
/// `docs/format.md`, "Codecs"): level 1 gives nearly the ratio of level 2-3 at a clearly
/// higher write speed, and decode speed does not depend on it.
pub const DEFLATE_LEVEL: u8 = 1;

/// How a record's bytes are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Codec {
    /// Stored verbatim.
    Raw = 0,
    /// Raw DEFLATE (RFC 1951).
    Flate = 1,
}

impl Codec {
    /// Every codec, in tag order.
    pub const ALL: [Codec; 2] = [Codec::Raw, Codec::Flate];

    /// The codec with on-disk tag `tag`, if known.
    pub fn from_tag(tag: u8) -> Option<Codec> {
        match tag {
            0 => Some(Codec::Raw),
            1 => Some(Codec::Flate),
            _ => None,
        }
    }

    /// The on-disk tag.
    pub fn tag(self) -> u8 {
        self as u8
    }

    /// The codec called `name` ("raw" or "flate"), as in loaderx's `CODECS`.
    pub fn from_name(name: &str) -> Option<Codec> {
        match name {
            "raw" => Some(Codec::Raw),
            "flate" => Some(Codec::Flate),
            _ => None,
        }
    }

    /// The codec's name.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Raw => "raw",
            Codec::Flate => "flate",
        }
    }
}

impl core::fmt::Display for Codec {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Default of [`CodecPolicy::min_savings`]: a compressed record is kept only when it is at
/// least this fraction smaller than the record. Chosen from the benchmark's realistic data
/// sets (`docs/codecs.md`): records that DEFLATE shrinks by less cost a full inflate on
/// every read to save a few percent of disk. ZFS keeps a compressed block under the same
/// 12.5% rule.
pub const DEFAULT_MIN_SAVINGS: f64 = 0.125;

/// Granularity of [`CodecPolicy::min_savings`]: it is kept in millionths, so the decision is
/// integer arithmetic and the same on every host (native and wasm stores stay identical).
const PPM: u64 = 1_000_000;

/// How append stores a record: the codec to try and when its output is worth keeping.
///
/// A record whose compressed form does not save at least `min_savings` of its length is
/// stored raw (tag 0), which every reader, loaderx 0.5.4 included, reads as it reads any
/// raw record. Converting from a [`Codec`] gives the default policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CodecPolicy {
    /// The codec to try; [`Codec::Raw`] stores every record verbatim.
    pub codec: Codec,
    min_savings_ppm: u32,
}

impl CodecPolicy {
    /// `codec`, keeping a compressed record only when it saves at least `min_savings` (a
    /// fraction in `0.0..=1.0`, rounded to millionths) of the record's length. `0.0` keeps
    /// any compressed form that is strictly smaller (loaderx's rule); `1.0` stores
    /// everything raw.
    pub fn new(codec: Codec, min_savings: f64) -> Result<Self, Error> {
        if !(0.0..=1.0).contains(&min_savings) {
            return Err(Error::InvalidArgument(alloc::format!(
                "min_savings must be a fraction between 0.0 and 1.0, got {min_savings}"
            )));
        }
        // Round half up to millionths; `as` truncates, and the value is in 0..=1e6 here.
        Ok(CodecPolicy { codec, min_savings_ppm: (min_savings * PPM as f64 + 0.5) as u32 })
    }

    /// The same policy with `codec` in place of its own.
    pub fn with_codec(self, codec: Codec) -> Self {
        CodecPolicy { codec, ..self }
    }

    /// The minimum fraction a compressed record must save to be kept.
    pub fn min_savings(&self) -> f64 {
        f64::from(self.min_savings_ppm) / PPM as f64
    }

    /// The largest compressed size of a `len`-byte record that is kept: it saves at least
    /// `min_savings * len` bytes, and at least one. 0 when nothing would be kept.
    pub fn keep_limit(&self, len: usize) -> usize {
        let need = (len as u64 * u64::from(self.min_savings_ppm)).div_ceil(PPM).max(1);
        (len as u64).saturating_sub(need) as usize
    }
}

impl From<Codec> for CodecPolicy {
    fn from(codec: Codec) -> Self {
        CodecPolicy { codec, min_savings_ppm: (DEFAULT_MIN_SAVINGS * PPM as f64 + 0.5) as u32 }
    }
}

/// A reusable raw-DEFLATE compressor; keep one per worker.
pub struct Deflater {
    dynamic: Box<CompressorOxide>,
    /// Static-Huffman-only twin, built on first use by a small record.
    fixed: Option<Box<CompressorOxide>>,
    scratch: Vec<u8>,
}

/// Records up to this size are compressed twice, with dynamic and with static Huffman
/// blocks, and the smaller stream is kept (static on a tie). For small records a dynamic
/// block's code-length header is a large share of the stream, and decoding it means
/// building Huffman tables for every record: on 256-byte records static blocks measured
/// both smaller and about 4x faster to inflate. From about 1 KiB on, dynamic blocks win
/// on size, and the table build is amortised.
pub const SMALL_RECORD: usize = 1024;

impl Default for Deflater {
    fn default() -> Self {
        Self::new()
    }
}

fn run(state: &mut CompressorOxide, src: &[u8], out: &mut [u8]) -> Option<usize> {
    state.reset();
    let (status, consumed, written) = compress(state, src, out, TDEFLFlush::Finish);
    (status == TDEFLStatus::Done && consumed == src.len()).then_some(written)
}

impl Deflater {
    /// A compressor at [`DEFLATE_LEVEL`], emitting raw DEFLATE (negative window bits).
    pub fn new() -> Self {
        let flags = create_comp_flags_from_zip_params(i32::from(DEFLATE_LEVEL), -15, 0);
        Deflater { dynamic: Box::new(CompressorOxide::new(flags)), fixed: None, scratch: Vec::new() }
    }

    /// Compresses `src` into `out` and returns the compressed size, or `None` when the
    /// compressed form would not be strictly smaller than `src` (store it raw then). Only
    /// the first `src.len() - 1` bytes of `out` are ever used. Deterministic: the same
    /// input gives the same bytes on every host.
    pub fn compress(&mut self, src: &[u8], out: &mut [u8]) -> Option<usize> {
        if src.len() < 2 {
            return None;
        }
        let limit = (src.len() - 1).min(out.len());
        if src.len() > SMALL_RECORD {
            return run(&mut self.dynamic, src, &mut out[..limit]);
        }
        let fixed = self.fixed.get_or_insert_with(|| {
            let flags = create_comp_flags_from_zip_params(i32::from(DEFLATE_LEVEL), -15, 0);
            Box::new(CompressorOxide::new(flags | TDEFL_FORCE_ALL_STATIC_BLOCKS))
        });
        let by_fixed = run(fixed, src, &mut out[..limit]);
        self.scratch.resize(by_fixed.unwrap_or(limit), 0);
        match run(&mut self.dynamic, src, &mut self.scratch) {
            Some(n) if by_fixed.is_none_or(|f| n < f) => {
                out[..n].copy_from_slice(&self.scratch[..n]);
                Some(n)
            }
            _ => by_fixed,
        }
    }
}

/// Inflates the raw DEFLATE stream `src` into exactly `dst`: fails if the stream would
/// produce more or fewer than `dst.len()` bytes, or is malformed. Never writes outside `dst`.
pub fn inflate_into(src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
    #[cfg(feature = "libdeflate")]
    return libdeflate_into(src, dst);
    #[cfg(not(feature = "libdeflate"))]
    miniz_into(src, dst)
}

#[cfg(feature = "libdeflate")]
fn libdeflate_into(src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
    use libdeflater::{DecompressionError, Decompressor};
    std::thread_local! {
        // A decompressor is ~10 KiB of tables; one per thread, reused across records.
        static DECOMPRESSOR: core::cell::RefCell<Decompressor> = core::cell::RefCell::new(Decompressor::new());
    }
    let result = DECOMPRESSOR.with(|d| d.borrow_mut().deflate_decompress(src, dst));
    match result {
        Ok(n) if n == dst.len() => Ok(()),
        Ok(produced) => Err(DecodeError::TooShort { produced, logic: dst.len() as u32 }),
        Err(DecompressionError::InsufficientSpace) => Err(DecodeError::TooLong { logic: dst.len() as u32 }),
        Err(DecompressionError::BadData) => Err(DecodeError::Corrupt),
    }
}

/// The pure-Rust inflater: what `no_std` and wasm builds use, and the reference the
/// libdeflate path is tested against.
#[cfg_attr(feature = "libdeflate", allow(dead_code))]
fn miniz_into(src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
    let mut state = DecompressorOxide::new();
    let flags = inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
    let (status, _consumed, produced) = decompress(&mut state, src, dst, 0, flags);
    match status {
        TINFLStatus::Done if produced == dst.len() => Ok(()),
        TINFLStatus::Done => Err(DecodeError::TooShort { produced, logic: dst.len() as u32 }),
        TINFLStatus::HasMoreOutput => Err(DecodeError::TooLong { logic: dst.len() as u32 }),
        _ => Err(DecodeError::Corrupt),
    }
}

/// Decodes one stored record into `dst`, whose length is the record's logical length.
pub fn decode_into(codec: Codec, src: &[u8], dst: &mut [u8]) -> Result<(), DecodeError> {
    match codec {
        Codec::Raw if src.len() == dst.len() => {
            dst.copy_from_slice(src);
            Ok(())
        }
        Codec::Raw => Err(DecodeError::RawLengthMismatch { logic: dst.len() as u32, phys: src.len() as u32 }),
        Codec::Flate => inflate_into(src, dst),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    fn compress_vec(src: &[u8]) -> Option<Vec<u8>> {
        let mut out = vec![0u8; src.len()];
        Deflater::new().compress(src, &mut out).map(|n| out[..n].to_vec())
    }

    #[test]
    fn tags_and_names() {
        for c in Codec::ALL {
            assert_eq!(Codec::from_tag(c.tag()), Some(c));
            assert_eq!(Codec::from_name(c.name()), Some(c));
        }
        assert_eq!(Codec::from_tag(2), None);
        assert_eq!(Codec::from_name("zstd"), None);
    }

    #[test]
    fn compressible_round_trip_is_raw_deflate() {
        let src: Vec<u8> = (0..100u32).map(|i| (i % 7) as u8).collect();
        let packed = compress_vec(&src).expect("compressible");
        assert!(packed.len() < src.len());
        // A zlib stream would start with 0x78; raw DEFLATE has no header.
        assert_ne!(packed[0], 0x78);
        let mut out = vec![0u8; src.len()];
        inflate_into(&packed, &mut out).unwrap();
        assert_eq!(out, src);
    }

    #[test]
    fn incompressible_falls_back_to_raw() {
        let mut x = 0x9e37_79b9_u32;
        let src: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        assert_eq!(compress_vec(&src), None);
        assert_eq!(compress_vec(&[7]), None);
    }

    #[test]
    fn small_records_keep_the_smaller_of_static_and_dynamic() {
        let dynamic_only = |src: &[u8]| {
            let flags = create_comp_flags_from_zip_params(i32::from(DEFLATE_LEVEL), -15, 0);
            let mut c = CompressorOxide::new(flags);
            let mut out = vec![0u8; src.len() * 2 + 64];
            run(&mut c, src, &mut out).unwrap()
        };
        for len in [16usize, 64, 256, 1000] {
            let src: Vec<u8> = (0..len).map(|i| (i / 13) as u8 ^ (i % 3) as u8).collect();
            let packed = compress_vec(&src).expect("compressible");
            assert!(packed.len() <= dynamic_only(&src), "{len}");
            assert_eq!(compress_vec(&src).unwrap(), packed, "deterministic");
            let mut out = vec![0u8; len];
            inflate_into(&packed, &mut out).unwrap();
            assert_eq!(out, src);
        }
        // 256 bytes of a slowly varying ramp: the static-block stream is the smaller one,
        // and its first block header says so (BTYPE = 01).
        let ramp: Vec<u8> = (0..256).map(|i| (i / 97) as u8 ^ ((i * 7) % 5) as u8).collect();
        let packed = compress_vec(&ramp).unwrap();
        assert!(packed.len() < dynamic_only(&ramp));
        assert_eq!((packed[0] >> 1) & 0b11, 0b01);
    }

    #[test]
    fn policy_limits_round_and_bound() {
        let p = |s| CodecPolicy::new(Codec::Flate, s).unwrap();
        // 0.0 is loaderx's rule: one byte saved is enough.
        assert_eq!(p(0.0).keep_limit(1000), 999);
        assert_eq!(p(0.125).keep_limit(1000), 875);
        // 12.5% of 1001 is 125.125 bytes: 126 must be saved.
        assert_eq!(p(0.125).keep_limit(1001), 875);
        assert_eq!(p(1.0).keep_limit(1000), 0);
        assert_eq!(p(0.125).keep_limit(1), 0);
        assert_eq!(p(0.1).min_savings(), 0.1);
        assert_eq!(CodecPolicy::from(Codec::Flate), p(DEFAULT_MIN_SAVINGS));
        for bad in [-0.01, 1.01, f64::NAN, f64::INFINITY] {
            assert!(matches!(CodecPolicy::new(Codec::Flate, bad), Err(Error::InvalidArgument(_))), "{bad}");
        }
    }

    #[test]
    fn compress_respects_an_output_limit() {
        // About 30% compressible: kept under a 10% rule, refused under a 50% rule.
        let mut x = 0x1234_5678_u32;
        let src: Vec<u8> = (0..8192)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                if i % 10 < 4 {
                    0
                } else {
                    x as u8
                }
            })
            .collect();
        let mut out = vec![0u8; src.len()];
        let mut d = Deflater::new();
        let n = d.compress(&src, &mut out).expect("compressible");
        let saved = 1.0 - n as f64 / src.len() as f64;
        assert!(saved > 0.1 && saved < 0.5, "{saved}");
        let lim = |s| CodecPolicy::new(Codec::Flate, s).unwrap().keep_limit(src.len());
        assert_eq!(d.compress(&src, &mut out[..lim(0.1)]), Some(n));
        assert_eq!(d.compress(&src, &mut out[..lim(0.5)]), None);
        assert_eq!(d.compress(&src, &mut out[..n]), Some(n));
        assert_eq!(d.compress(&src, &mut out[..n - 1]), None);
    }

    #[test]
    fn inflate_rejects_wrong_lengths_and_garbage() {
        let src = vec![0u8; 1000];
        let packed = compress_vec(&src).unwrap();
        let mut short = vec![0u8; 999];
        assert_eq!(inflate_into(&packed, &mut short), Err(DecodeError::TooLong { logic: 999 }));
        let mut long = vec![0u8; 1001];
        assert!(matches!(inflate_into(&packed, &mut long), Err(DecodeError::TooShort { produced: 1000, .. })));
        let mut out = vec![0u8; 1000];
        assert!(inflate_into(&packed[..packed.len() / 2], &mut out).is_err());
        assert_eq!(inflate_into(&[0xff, 0xff, 0xff], &mut out), Err(DecodeError::Corrupt));
    }

    #[test]
    fn bomb_is_bounded_by_destination() {
        // 1 MiB of zeros compresses to about a kilobyte; inflating it into 4 KiB must stop.
        let packed = compress_vec(&vec![0u8; 1 << 20]).unwrap();
        let mut out = vec![0u8; 4096];
        assert_eq!(inflate_into(&packed, &mut out), Err(DecodeError::TooLong { logic: 4096 }));
    }

    proptest! {
        #[test]
        fn any_bytes_round_trip(src in proptest::collection::vec(any::<u8>(), 0..5000), rep in 1usize..4) {
            let src: Vec<u8> = src.iter().cycle().take(src.len() * rep).copied().collect();
            let mut out = vec![0u8; src.len()];
            match compress_vec(&src) {
                Some(packed) => {
                    prop_assert!(packed.len() < src.len());
                    decode_into(Codec::Flate, &packed, &mut out).unwrap();
                }
                None => decode_into(Codec::Raw, &src, &mut out).unwrap(),
            }
            prop_assert_eq!(out, src);
        }

        /// The native fast path and the pure-Rust inflater must agree on every input they
        /// both accept, and on valid streams must both accept.
        #[cfg(feature = "libdeflate")]
        #[test]
        fn libdeflate_agrees_with_miniz(src in proptest::collection::vec(any::<u8>(), 0..3000), garbage in proptest::collection::vec(any::<u8>(), 0..64), n in 0usize..4000) {
            if let Some(packed) = compress_vec(&src) {
                let (mut a, mut b) = (vec![0u8; src.len()], vec![0u8; src.len()]);
                prop_assert_eq!(libdeflate_into(&packed, &mut a), Ok(()));
                prop_assert_eq!(miniz_into(&packed, &mut b), Ok(()));
                prop_assert_eq!(&a, &src);
                prop_assert_eq!(&b, &src);
            }
            let (mut a, mut b) = (vec![0u8; n], vec![0u8; n]);
            if let (Ok(()), Ok(())) = (libdeflate_into(&garbage, &mut a), miniz_into(&garbage, &mut b)) {
                prop_assert_eq!(a, b);
            }
        }

        #[test]
        fn inflate_never_panics(src in proptest::collection::vec(any::<u8>(), 0..512), n in 0usize..2048) {
            let mut out = vec![0u8; n];
            let _ = inflate_into(&src, &mut out);
        }
    }
}
