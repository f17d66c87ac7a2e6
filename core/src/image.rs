//! Encoded images (the `image` field kind, docs/format.md "Image fields"): which format a
//! value is in and its size, read from its header without decoding it ([`info`]), so a
//! writer can refuse what is not an image and a loader can plan a crop and refuse a
//! decompression bomb before a pixel is decoded.
//!
//! - [`crop`]: the crops, resizes and flips a loader's image pipeline makes, each a keyed
//!   function of (seed, step, sample, field), never of a worker.
//! - [`render`] (feature `images`): decoding (JPEG by zune-jpeg, PNG by png, WebP by
//!   image-webp; docs/decisions/image-decoders.md) and the crop's resize (fast_image_resize)
//!   into a batch's buffer.
//! - [`turbo`] (feature `turbojpeg`, the native host's): JPEG by libjpeg-turbo instead,
//!   decoding only the part of the image a crop reads.

use alloc::string::String;
use core::fmt;

pub mod crop;
#[cfg(feature = "images")]
pub mod render;
#[cfg(feature = "turbojpeg")]
pub mod turbo;
#[cfg(feature = "images")]
mod write;

/// Largest image a loader decodes by default, in pixels (`width * height`): 2^28, Pillow's
/// own bomb limit is 2^27 (with a warning from half of it).
pub const DEFAULT_MAX_PIXELS: u64 = 1 << 28;

/// An encoding an image field holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ImageFormat {
    /// JPEG (baseline or progressive), `FF D8` first.
    Jpeg,
    /// PNG, its 8-byte signature first.
    Png,
    /// WebP (lossy `VP8 `, lossless `VP8L` or extended `VP8X`) in a RIFF container.
    WebP,
}

impl ImageFormat {
    /// The format's name: `jpeg`, `png` or `webp`.
    pub fn name(self) -> &'static str {
        match self {
            ImageFormat::Jpeg => "jpeg",
            ImageFormat::Png => "png",
            ImageFormat::WebP => "webp",
        }
    }
}

/// What an image's header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageInfo {
    /// Its encoding.
    pub format: ImageFormat,
    /// Pixels across.
    pub width: u32,
    /// Pixels down.
    pub height: u32,
}

impl ImageInfo {
    /// `width * height`.
    pub fn pixels(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height)
    }
}

/// Why a value is not an image a loader can use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageError {
    /// The first bytes are none of the formats' signatures.
    UnknownFormat {
        /// Up to 8 first bytes, for the message.
        first: [u8; 8],
        /// How many of them there are.
        len: u8,
    },
    /// The header ends before it gives the size, or gives a size of 0.
    BadHeader {
        /// The format the signature named.
        format: ImageFormat,
        /// What is wrong.
        why: &'static str,
    },
    /// The header claims more pixels than the reader's limit (a decompression bomb).
    TooManyPixels {
        /// The header.
        info: ImageInfo,
        /// The limit.
        max: u64,
    },
    /// The decoder refused the data (truncated, corrupt, an unsupported variant).
    Decoder {
        /// The format.
        format: ImageFormat,
        /// The decoder's message.
        why: String,
    },
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageError::UnknownFormat { first, len } => {
                write!(f, "is not a JPEG, PNG or WebP image (first bytes")?;
                for b in &first[..usize::from(*len)] {
                    write!(f, " {b:02x}")?;
                }
                write!(f, ")")
            }
            ImageError::BadHeader { format, why } => write!(f, "{} header {why}", format.name()),
            ImageError::TooManyPixels { info, max } => write!(
                f,
                "{} header claims {} x {} = {} pixels, over the limit of {max} (max_pixels)",
                info.format.name(),
                info.width,
                info.height,
                info.pixels()
            ),
            ImageError::Decoder { format, why } => write!(f, "{} image does not decode: {why}", format.name()),
        }
    }
}

/// The format `bytes` start with, if any.
pub fn sniff(bytes: &[u8]) -> Option<ImageFormat> {
    if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some(ImageFormat::Jpeg)
    } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(ImageFormat::Png)
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some(ImageFormat::WebP)
    } else {
        None
    }
}

/// The format and size `bytes` say they are, from the header alone.
pub fn info(bytes: &[u8]) -> Result<ImageInfo, ImageError> {
    let Some(format) = sniff(bytes) else {
        let mut first = [0u8; 8];
        let len = bytes.len().min(8);
        first[..len].copy_from_slice(&bytes[..len]);
        return Err(ImageError::UnknownFormat { first, len: len as u8 });
    };
    let bad = |why| ImageError::BadHeader { format, why };
    let (width, height) = match format {
        ImageFormat::Png => png_size(bytes).ok_or(bad("ends before its IHDR chunk"))?,
        ImageFormat::Jpeg => jpeg_size(bytes).map_err(bad)?,
        ImageFormat::WebP => webp_size(bytes).ok_or(bad("ends before its size"))?,
    };
    if width == 0 || height == 0 {
        return Err(bad("gives a width or height of 0"));
    }
    Ok(ImageInfo { format, width, height })
}

/// [`info`], refusing an image of more than `max_pixels`.
pub fn checked_info(bytes: &[u8], max_pixels: u64) -> Result<ImageInfo, ImageError> {
    let info = info(bytes)?;
    if info.pixels() > max_pixels {
        return Err(ImageError::TooManyPixels { info, max: max_pixels });
    }
    Ok(info)
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn le24(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 3)?;
    Some(u32::from(s[0]) | u32::from(s[1]) << 8 | u32::from(s[2]) << 16)
}

/// PNG: the IHDR chunk, which must come first, holds width and height (big-endian).
fn png_size(b: &[u8]) -> Option<(u32, u32)> {
    (b.get(12..16)? == b"IHDR").then_some(())?;
    Some((be32(b, 16)?, be32(b, 20)?))
}

/// JPEG: walks the markers from SOI to the first start-of-frame (SOF0-SOF15 but DHT,
/// JPG and DAC), whose segment holds precision, height and width.
fn jpeg_size(b: &[u8]) -> Result<(u32, u32), &'static str> {
    const SHORT: &str = "ends before its start-of-frame segment";
    let mut at = 2;
    loop {
        // A marker: one or more 0xFF, then its code.
        if *b.get(at).ok_or(SHORT)? != 0xFF {
            return Err("has bytes between segments where a marker belongs");
        }
        while b.get(at) == Some(&0xFF) {
            at += 1;
        }
        let code = *b.get(at).ok_or(SHORT)?;
        at += 1;
        match code {
            // Markers without a segment: TEM and RST0-7.
            0x01 | 0xD0..=0xD7 => continue,
            0xD9 => return Err("ends (EOI) before a start-of-frame segment"),
            0xDA => return Err("starts its scan before a start-of-frame segment"),
            _ => {}
        }
        let len = usize::from(be16(b, at).ok_or(SHORT)?);
        if len < 2 {
            return Err("has a segment shorter than its length field");
        }
        if matches!(code, 0xC0..=0xCF) && !matches!(code, 0xC4 | 0xC8 | 0xCC) {
            let height = be16(b, at + 3).ok_or(SHORT)?;
            let width = be16(b, at + 5).ok_or(SHORT)?;
            return Ok((u32::from(width), u32::from(height)));
        }
        at += len;
    }
}

/// WebP: the first chunk after `WEBP` is `VP8 ` (lossy: 14-bit sizes after the start code),
/// `VP8L` (lossless: 14-bit sizes minus one after the signature byte) or `VP8X`
/// (extended: 24-bit canvas sizes minus one).
fn webp_size(b: &[u8]) -> Option<(u32, u32)> {
    let chunk = b.get(12..16)?;
    let data = 20;
    match chunk {
        b"VP8 " => {
            (b.get(data + 3..data + 6)? == [0x9D, 0x01, 0x2A]).then_some(())?;
            Some((u32::from(le16(b, data + 6)? & 0x3FFF), u32::from(le16(b, data + 8)? & 0x3FFF)))
        }
        b"VP8L" => {
            (*b.get(data)? == 0x2F).then_some(())?;
            let bits = u32::from_le_bytes(b.get(data + 1..data + 5)?.try_into().ok()?);
            Some(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
        }
        b"VP8X" => Some((le24(b, data + 4)? + 1, le24(b, data + 7)? + 1)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_give_the_format_and_size() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend_from_slice(&640u32.to_be_bytes());
        png.extend_from_slice(&480u32.to_be_bytes());
        assert_eq!(info(&png), Ok(ImageInfo { format: ImageFormat::Png, width: 640, height: 480 }));
        // SOI, an APP0 segment, an RST marker, fill bytes, SOF2 (progressive).
        let jpeg = [
            0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0xAA, 0xBB, 0xFF, 0xD0, 0xFF, 0xFF, 0xC2, 0x00, 0x11, 0x08, 0x01, 0x77,
            0x01, 0xF4,
        ];
        assert_eq!(info(&jpeg), Ok(ImageInfo { format: ImageFormat::Jpeg, width: 500, height: 375 }));
        let mut webp = b"RIFF\0\0\0\0WEBPVP8X\0\0\0\0\0\0\0\0".to_vec();
        webp.extend_from_slice(&[0xFF, 0x01, 0x00, 0x2B, 0x01, 0x00]);
        assert_eq!(info(&webp), Ok(ImageInfo { format: ImageFormat::WebP, width: 512, height: 300 }));
    }

    #[test]
    fn every_cut_header_is_an_error_not_a_panic() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend_from_slice(&[0, 0, 1, 0, 0, 0, 1, 0]);
        for cut in 0..png.len() {
            assert!(info(&png[..cut]).is_err(), "{cut}");
        }
        assert!(matches!(info(b"GIF89a.."), Err(ImageError::UnknownFormat { len: 8, .. })));
        let zero = [0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x11, 0x08, 0x00, 0x00, 0x01, 0xF4];
        assert!(matches!(info(&zero), Err(ImageError::BadHeader { .. })));
        let bomb = {
            let mut p = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
            p.extend_from_slice(&[0, 1, 0, 0, 0, 1, 0, 0]);
            p
        };
        let e = checked_info(&bomb, DEFAULT_MAX_PIXELS).unwrap_err();
        assert!(alloc::format!("{e}").contains("65536 x 65536"), "{e}");
    }
}
