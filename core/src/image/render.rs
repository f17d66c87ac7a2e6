//! Decoding an image and making a pipeline's output of it (feature `images`): the header
//! checked against `max_pixels` first ([`super::checked_info`]), the pixels decoded to
//! 8-bit RGB (JPEG by libjpeg-turbo, only the part the crop reads, `turbo.rs`, or by
//! zune-jpeg in strict mode where that is not built; PNG by png, WebP by image-webp: chosen
//! by measurement, docs/decisions/image-decoders.md), the crop resized to the output size by
//! fast_image_resize's bilinear convolution (antialiased when shrinking, as Pillow and
//! torchvision's tensors are), and written mirrored if the plan says so, as the pipeline's
//! dtype and layout, straight into the caller's slot of a batch buffer (`write.rs`).
//!
//! Grey images are widened to RGB and an alpha channel is dropped, as Pillow's
//! `convert("RGB")` does. A decoder's refusal (truncated, corrupt, unsupported) is an
//! [`ImageError::Decoder`]; nothing here panics on bad input.

use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};

use super::crop::{Crop, Key, Pipeline};
use super::write::write_out;
use super::{checked_info, ImageError, ImageFormat, ImageInfo};

/// Decoded pixels: `width * height * 3` bytes of RGB, row by row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rgb {
    /// Pixels across.
    pub width: u32,
    /// Pixels down.
    pub height: u32,
    /// The values.
    pub pixels: Vec<u8>,
}

/// Largest decoded buffer a thread keeps for its next image (16 MiB: a 5-megapixel region).
const KEEP_DECODED: usize = 16 << 20;

/// What a thread keeps between images: the resizer's buffers and the output's.
#[derive(Default)]
pub struct Scratch {
    resizer: Resizer,
    resized: Vec<u8>,
    /// The decoded part of the last image, its buffer reused for the next.
    decoded: Vec<u8>,
}

impl core::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Scratch")
    }
}

/// Decodes `bytes` to RGB, refusing an image whose header claims more than `max_pixels`.
pub fn decode(bytes: &[u8], max_pixels: u64) -> Result<Rgb, ImageError> {
    let info = checked_info(bytes, max_pixels)?;
    let part = decode_part(bytes, &info, None, Vec::new())?;
    Ok(Rgb { width: part.width, height: part.height, pixels: part.pixels })
}

/// Pixels of the rectangle `x, y, width, height` of an image: `width * height * 3` bytes
/// of RGB, row by row.
pub(crate) struct Part {
    pub(crate) x: u32,
    pub(crate) y: u32,
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) pixels: Vec<u8>,
}

/// The part of an image that resizing a crop of it reads: the crop and, on each side, the
/// reach of the bilinear kernel (one source pixel per output pixel, or the shrink factor),
/// plus two pixels (with one, a JPEG's chroma upsampling at the edge still changed the
/// output); clamped to the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// Left edge.
    pub x: u32,
    /// Top edge.
    pub y: u32,
    /// Right edge, exclusive.
    pub right: u32,
    /// Bottom edge, exclusive.
    pub bottom: u32,
}

impl Region {
    /// The whole of a `width x height` image.
    pub fn whole(width: u32, height: u32) -> Region {
        Region { x: 0, y: 0, right: width, bottom: height }
    }

    /// What resizing `crop` of a `width x height` image to `out_width x out_height` reads.
    pub fn around(crop: &Crop, out_width: u32, out_height: u32, width: u32, height: u32) -> Region {
        let reach = |from: u32, to: u32| (f64::from(from) / f64::from(to.max(1))).max(1.0) as u32 + 2;
        let (dx, dy) = (reach(crop.width, out_width), reach(crop.height, out_height));
        Region {
            x: crop.x.saturating_sub(dx),
            y: crop.y.saturating_sub(dy),
            right: (crop.x + crop.width).saturating_add(dx).min(width),
            bottom: (crop.y + crop.height).saturating_add(dy).min(height),
        }
    }
}

/// Decodes `bytes`, whose header is `info`: the whole image, or at least `region` of it
/// where the decoder can decode a part (JPEG through libjpeg-turbo, into `buffer`).
#[cfg_attr(not(feature = "turbojpeg"), allow(unused_variables))]
fn decode_part(bytes: &[u8], info: &ImageInfo, region: Option<Region>, buffer: Vec<u8>) -> Result<Part, ImageError> {
    let failed = |why: alloc::string::String| ImageError::Decoder { format: info.format, why };
    let whole = |(width, height, channels, pixels): Decoded| Part {
        x: 0,
        y: 0,
        width,
        height,
        pixels: to_rgb(pixels, channels),
    };
    // `exact`: the decode must be of the whole image, as the header gives it.
    let (part, exact) = match info.format {
        #[cfg(feature = "turbojpeg")]
        ImageFormat::Jpeg => match super::turbo::decode(bytes, region, buffer) {
            Ok(part) => (part, region.is_none()),
            Err(super::turbo::Failed::Corrupt(why)) => return Err(failed(why)),
            // CMYK and YCCK, which TurboJPEG does not turn into RGB.
            Err(super::turbo::Failed::Unsupported) => (whole(jpeg(bytes, info).map_err(failed)?), true),
        },
        #[cfg(not(feature = "turbojpeg"))]
        ImageFormat::Jpeg => (whole(jpeg(bytes, info).map_err(failed)?), true),
        ImageFormat::Png => (whole(png(bytes).map_err(failed)?), true),
        ImageFormat::WebP => (whole(webp(bytes).map_err(failed)?), true),
    };
    let (w, h) = (part.width, part.height);
    let inside = u64::from(part.x) + u64::from(w) <= u64::from(info.width)
        && u64::from(part.y) + u64::from(h) <= u64::from(info.height);
    if !inside || (exact && (w, h) != (info.width, info.height)) {
        let why = alloc::format!("decodes to {w} x {h}, its header says {} x {}", info.width, info.height);
        return Err(failed(why));
    }
    if part.pixels.len() != w as usize * h as usize * 3 {
        return Err(failed(alloc::format!("gave {} bytes for {w} x {h} pixels", part.pixels.len())));
    }
    Ok(part)
}

/// Decodes `bytes` and writes `pipeline`'s output of it, planned by `key`, into `out`
/// (exactly [`Pipeline::sample_bytes`] long); returns the crop it made.
pub fn render(
    bytes: &[u8],
    pipeline: &Pipeline,
    key: &Key,
    out: &mut [u8],
    scratch: &mut Scratch,
) -> Result<Crop, ImageError> {
    assert_eq!(out.len(), pipeline.sample_bytes(), "the slot of one output image");
    // The crop is planned from the header, so only what it reads need be decoded.
    let info = checked_info(bytes, pipeline.max_pixels)?;
    let crop = pipeline.plan(key, info.width, info.height);
    let needed = Region::around(&crop, pipeline.width, pipeline.height, info.width, info.height);
    let image = decode_part(bytes, &info, Some(needed), core::mem::take(&mut scratch.decoded))?;
    draw(&image, &crop, needed, info.format, pipeline, out, scratch)?;
    // Kept for the next image unless it is large: one huge image must not leave every
    // worker thread holding its pixels.
    if image.pixels.capacity() <= KEEP_DECODED {
        scratch.decoded = image.pixels;
    }
    Ok(crop)
}

/// Writes `pipeline`'s output of `crop` into `out`, from `image`, a decoded part that must
/// cover `needed`.
fn draw(
    image: &Part,
    crop: &Crop,
    needed: Region,
    format: ImageFormat,
    pipeline: &Pipeline,
    out: &mut [u8],
    scratch: &mut Scratch,
) -> Result<(), ImageError> {
    let covers = image.x <= needed.x
        && image.y <= needed.y
        && image.x + image.width >= needed.right
        && image.y + image.height >= needed.bottom;
    if !covers {
        let why = alloc::format!(
            "decoded {} x {} pixels at ({}, {}), not the part asked for",
            image.width,
            image.height,
            image.x,
            image.y
        );
        return Err(ImageError::Decoder { format, why });
    }
    // The crop in the decoded part's own coordinates.
    let (cx, cy) = (crop.x - image.x, crop.y - image.y);
    let (w, h) = (pipeline.width as usize, pipeline.height as usize);
    let resized = &mut scratch.resized;
    resized.clear();
    resized.resize(w * h * 3, 0);
    if (crop.width as usize, crop.height as usize) == (w, h) {
        // No resampling: the crop's rows as they are (a decode at its own size is exact).
        let stride = image.width as usize * 3;
        for (row, dst) in resized.chunks_exact_mut(w * 3).enumerate() {
            let at = (cy as usize + row) * stride + cx as usize * 3;
            dst.copy_from_slice(&image.pixels[at..at + w * 3]);
        }
    } else {
        let src = ImageRef::new(image.width, image.height, &image.pixels, PixelType::U8x3)
            .expect("decode checked the pixels' length");
        let mut dst = Image::from_slice_u8(pipeline.width, pipeline.height, resized, PixelType::U8x3)
            .expect("a buffer of the output's size");
        let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear)).crop(
            f64::from(cx),
            f64::from(cy),
            f64::from(crop.width),
            f64::from(crop.height),
        );
        scratch.resizer.resize(&src, &mut dst, &options).expect("a crop inside the image, sizes of at least 1");
    }
    write_out(resized, pipeline, w, crop.flip, out);
    Ok(())
}

/// 8-bit pixels of 1 (grey), 2 (grey, alpha), 3 (RGB) or 4 (RGBA) channels as RGB.
fn to_rgb(pixels: Vec<u8>, channels: usize) -> Vec<u8> {
    match channels {
        3 => pixels,
        1 => pixels.iter().flat_map(|&v| [v, v, v]).collect(),
        2 => pixels.chunks_exact(2).flat_map(|p| [p[0], p[0], p[0]]).collect(),
        _ => pixels.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect(),
    }
}

type Decoded = (u32, u32, usize, Vec<u8>);

fn jpeg(bytes: &[u8], info: &ImageInfo) -> Result<Decoded, alloc::string::String> {
    use zune_core::colorspace::ColorSpace;
    use zune_core::options::DecoderOptions;
    let options = DecoderOptions::default()
        .jpeg_set_out_colorspace(ColorSpace::RGB)
        .set_strict_mode(true)
        .set_max_width(info.width as usize)
        .set_max_height(info.height as usize);
    let mut d = zune_jpeg::JpegDecoder::new_with_options(bytes, options);
    // zune-jpeg's messages are quoted, their lines joined by an escaped newline.
    let said = |e: zune_jpeg::errors::DecodeErrors| {
        alloc::format!("{e}").trim_matches('"').replace("\\n", "; ").replace('\n', "; ")
    };
    let pixels = d.decode().map_err(said)?;
    let (w, h) = d.dimensions().ok_or("no dimensions after decoding")?;
    let channels = d.get_output_colorspace().map_or(3, |c| c.num_components());
    Ok((w as u32, h as u32, channels, pixels))
}

fn png(bytes: &[u8]) -> Result<Decoded, alloc::string::String> {
    let mut decoder = ::png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(::png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().map_err(|e| e.to_string())?;
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).map_err(|e| e.to_string())?;
    pixels.truncate(frame.buffer_size());
    let channels = frame.color_type.samples();
    Ok((frame.width, frame.height, channels, pixels))
}

fn webp(bytes: &[u8]) -> Result<Decoded, alloc::string::String> {
    let mut d = image_webp::WebPDecoder::new(std::io::Cursor::new(bytes)).map_err(|e| e.to_string())?;
    let (w, h) = d.dimensions();
    let size = d.output_buffer_size().ok_or("an image too large to hold")?;
    let mut pixels = vec![0; size];
    d.read_image(&mut pixels).map_err(|e| e.to_string())?;
    Ok((w, h, if d.has_alpha() { 4 } else { 3 }, pixels))
}

#[cfg(all(test, feature = "turbojpeg"))]
mod tests {
    use super::*;
    use crate::image::crop::{Dtype, Geometry, Layout};
    use crate::image::turbo::encode_for_tests;
    use proptest::prelude::*;

    /// A `width x height` RGB picture with edges and texture (a smooth field alone would
    /// hide an off-by-one row or column).
    fn picture(width: u32, height: u32, seed: u64) -> Vec<u8> {
        let mut state = seed | 1;
        let mut noise = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 40) as u8
        };
        let mut rgb = Vec::with_capacity(width as usize * height as usize * 3);
        for y in 0..height {
            for x in 0..width {
                let stripe = if (x / 7 + y / 5) % 2 == 0 { 120 } else { 0 };
                rgb.push((x * 255 / width.max(1)) as u8 / 2 + noise());
                rgb.push((y * 255 / height.max(1)) as u8 / 2 + stripe / 2);
                rgb.push(stripe + noise());
            }
        }
        rgb
    }

    fn pipeline(geometry: u8, width: u32, height: u32, flip: bool) -> Pipeline {
        Pipeline {
            geometry: match geometry % 3 {
                0 => Geometry::RandomResizedCrop { scale: (0.08, 1.0), ratio: (0.75, 4.0 / 3.0) },
                1 => Geometry::CenterCrop { ratio: 0.875 },
                _ => Geometry::Resize,
            },
            width,
            height,
            flip: if flip { 0.5 } else { 0.0 },
            dtype: Dtype::U8,
            layout: Layout::Hwc,
            mean: [0.0; 3],
            std: [1.0; 3],
            max_pixels: 1 << 24,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(160))]

        /// Decoding only the part a crop reads gives the pixels decoding the whole image
        /// gives, for every JPEG sampling, crop, shrink and enlargement.
        #[test]
        fn a_partial_decode_renders_what_a_whole_one_does(
            width in 1u32..260, height in 1u32..260, sampling in 0usize..6, quality in 40i32..98,
            geometry in any::<u8>(), out_w in 1u32..96, out_h in 1u32..96, seed in any::<u64>(), flip in any::<bool>(),
        ) {
            // TJSAMP_444, 422, 420, GRAY, 440, 411.
            let jpeg = encode_for_tests(&picture(width, height, seed), width, height, quality, [0, 1, 2, 3, 4, 5][sampling]);
            let p = pipeline(geometry, out_w, out_h, flip);
            let key = Key { seed, step: 1, source: 0, index: seed % 1000, field: 0 };
            let mut scratch = Scratch::default();
            let mut part = vec![0u8; p.sample_bytes()];
            let crop = render(&jpeg, &p, &key, &mut part, &mut scratch).unwrap();
            let info = checked_info(&jpeg, p.max_pixels).unwrap();
            let whole = decode_part(&jpeg, &info, None, Vec::new()).unwrap();
            prop_assert_eq!((whole.width, whole.height), (width, height));
            let needed = Region::around(&crop, out_w, out_h, width, height);
            let mut from_whole = vec![0u8; p.sample_bytes()];
            draw(&whole, &crop, needed, info.format, &p, &mut from_whole, &mut scratch).unwrap();
            prop_assert!(part == from_whole, "crop {:?} of {}x{} to {}x{}: the outputs differ", crop, width, height, out_w, out_h);
        }
    }

    #[test]
    fn a_truncated_jpeg_is_a_decoder_error_not_grey_rows() {
        let jpeg = encode_for_tests(&picture(64, 48, 3), 64, 48, 90, 2);
        for cut in [jpeg.len() / 2, jpeg.len() - 2] {
            match decode(&jpeg[..cut], 1 << 20) {
                Err(ImageError::Decoder { format: ImageFormat::Jpeg, why }) => assert!(!why.is_empty()),
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
        assert_eq!(decode(&jpeg, 1 << 20).unwrap().pixels.len(), 64 * 48 * 3);
    }

    #[test]
    fn a_bad_jpeg_leaves_the_next_good_one_decodable() {
        let good = encode_for_tests(&picture(80, 60, 5), 80, 60, 90, 2);
        let want = decode(&good, 1 << 20).unwrap();
        for cut in [200, good.len() / 2, good.len() - 3] {
            assert!(decode(&good[..cut], 1 << 20).is_err());
            assert_eq!(decode(&good, 1 << 20).unwrap(), want, "after a JPEG cut at {cut}");
        }
    }
}
